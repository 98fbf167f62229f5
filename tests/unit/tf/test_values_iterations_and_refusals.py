"""The names issue 19 listed as gaps: each works as in TF 2.21, or refuses as TF 2.21 (Keras 3) does.

``experimental_distribute_values_from_function`` and ``optimizer.iterations`` work; ``StringLookup`` refuses
because Keras 3 builds it on TensorFlow; ``model.save_spec`` is gone from Keras 3 (TF 2.21's tf.keras lacks it
too); ``tf.TypeSpec`` is the base of ``tf.TensorSpec``; tf.keras.preprocessing has Keras 2's ImageDataGenerator,
as TF 2.21's has.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import stratagem.tf as tf
import keras  # noqa: F401,I001 (after stratagem, which picks the torch backend; Keras sets TF_FORCE_GPU_ALLOW_GROWTH at import)


def test_values_from_function_gives_run_this_replicas_value() -> None:
    strategy = tf.distribute.MirroredStrategy()
    contexts = []

    def value_fn(ctx: tf.distribute.experimental.ValueContext) -> torch.Tensor:
        contexts.append((ctx.replica_id_in_sync_group, ctx.num_replicas_in_sync))
        return torch.tensor([10.0 + ctx.replica_id_in_sync_group])

    values = strategy.experimental_distribute_values_from_function(value_fn)
    assert contexts == [(0, 1)]
    assert strategy.run(lambda v: v * 2, args=(values,)).tolist() == [20.0]
    assert strategy.experimental_local_results(values)[0].tolist() == [10.0]
    assert float(strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None)) == 10.0


def test_optimizer_iterations_counts_the_updates_fit_applied() -> None:
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="mse")
    assert int(model.optimizer.iterations) == 0
    model.fit(np.ones((12, 3), np.float32), np.ones((12, 2), np.float32), batch_size=4, epochs=2, verbose=0)
    assert model.optimizer.iterations.numpy() == 6 and model.optimizer.iterations.dtype == torch.int64


def test_optimizer_iterations_of_a_torch_optimizer_names_the_fix() -> None:
    import stratagem

    module = torch.nn.Linear(3, 2)
    model = stratagem.Model(module)
    model.compile(optimizer=torch.optim.SGD(module.parameters(), lr=0.1), loss="mse")
    with pytest.raises(AttributeError, match="use a Keras optimizer"):
        model.optimizer.iterations  # noqa: B018


def test_string_lookup_refuses_because_keras_3_builds_it_on_tensorflow() -> None:
    with pytest.raises(ImportError, match="requires TensorFlow"):
        tf.keras.layers.StringLookup(vocabulary=["a", "b"])


def test_save_spec_is_absent_as_from_tf_2_21s_keras_3() -> None:
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])
    with pytest.raises(AttributeError, match="save_spec"):
        model.save_spec()


def test_type_spec_is_the_base_of_tensor_spec() -> None:
    spec = tf.TensorSpec(shape=(None, 2), dtype=tf.float32)
    assert isinstance(spec, tf.TypeSpec) and spec.value_type is tf.Tensor
    with pytest.raises(TypeError):
        tf.TypeSpec()  # abstract, as TF's


def test_image_data_generator_is_keras_2s_as_in_tf_2_21() -> None:
    generator = tf.keras.preprocessing.image.ImageDataGenerator(rescale=1.0 / 255)
    images, labels = next(generator.flow(np.full((4, 8, 8, 3), 255.0, np.float32), np.arange(4), batch_size=4,
                                         shuffle=False))
    np.testing.assert_allclose(images, np.ones((4, 8, 8, 3)))
    assert labels.tolist() == [0, 1, 2, 3]
