"""The tf. names TensorFlow's distributed-training tutorials and guides use: each resolves, or refuses with its reason.

The lists were read from tensorflow/docs (site/en/tutorials/distribute: keras, custom_training,
multi_worker_with_keras, multi_worker_with_ctl, parameter_server_training, save_and_load, input; site/en/guide:
distributed_training, data, data_performance), every ``tf.`` name of their code cells and of code in their prose
(``tf.GraphDef`` and ``tf.dtype`` in guide/data's prose are not TF 2 names). What TF 2.21 itself lacks
(``tf.estimator``, Keras 2's ``DatasetCreator``) is expected to fail here too.
"""

from __future__ import annotations

import warnings

import pytest

import stratagem.tf as tf
import keras  # noqa: F401,I001 (after stratagem, which picks the torch backend; Keras sets TF_FORCE_GPU_ALLOW_GROWTH at import)
from stratagem.data import Dataset

DOCUMENT_NAMES = {
    "custom_training": """
        GradientTape __version__ add_n cast data.Dataset.from_tensor_slices distribute.MirroredStrategy
        distribute.ReduceOp.SUM float32 function keras.Sequential keras.datasets.fashion_mnist keras.layers.Conv2D
        keras.layers.Dense keras.layers.Flatten keras.layers.MaxPooling2D keras.losses.Reduction.NONE
        keras.losses.SparseCategoricalCrossentropy keras.metrics.Mean keras.metrics.SparseCategoricalAccuracy
        keras.optimizers.Adam keras.regularizers.L2 nn.compute_average_loss nn.scale_regularization_loss
        reduce_prod shape train.Checkpoint train.latest_checkpoint""",
    "data": """
        Graph RaggedTensor SparseTensor Tensor TensorArray TypeSpec Variable cast constant
        data.Dataset.from_generator data.Dataset.from_tensor_slices data.Dataset.from_tensors
        data.Dataset.list_files data.Dataset.range data.Dataset.zip data.TFRecordDataset data.TextLineDataset
        data.experimental.Counter data.experimental.CsvDataset data.experimental.make_csv_dataset
        data.experimental.rejection_resample data.experimental.sample_from_datasets fill float32
        image.convert_image_dtype image.decode_jpeg image.decode_png image.resize image.rot90 int32
        io.FixedLenFeature io.parse_example io.read_file keras.Sequential keras.datasets.fashion_mnist
        keras.layers.Dense keras.layers.Flatten keras.losses.SparseCategoricalCrossentropy
        keras.preprocessing.image.ImageDataGenerator keras.utils.get_file newaxis not_equal py_function
        random.uniform reduce_sum sparse.SparseTensor stack string strings.split strings.substr train.Checkpoint
        train.CheckpointManager train.Example""",
    "data_performance": """
        concat data.Dataset data.Dataset.from_generator data.Dataset.range data.experimental.AUTOTUNE
        dtypes.float32 dtypes.int32 dtypes.int64 dtypes.string print py_function tile zeros""",
    "distributed_training": """
        GradientTape Variable config.experimental_connect_to_cluster config.list_physical_devices
        data.Dataset.from_tensors distribute.HierarchicalCopyAllReduce distribute.MirroredStrategy
        distribute.OneDeviceStrategy distribute.ReduceOp.SUM distribute.cluster_resolver.TPUClusterResolver
        distribute.experimental.CentralStorageStrategy distribute.experimental.CollectiveCommunication.NCCL
        distribute.experimental.MultiWorkerMirroredStrategy distribute.experimental.ParameterServerStrategy
        distribute.experimental.TPUStrategy distribute.get_strategy estimator.LinearRegressor estimator.RunConfig
        estimator.train_and_evaluate feature_column.numeric_column function keras.Sequential
        keras.estimator.model_to_estimator keras.layers.Dense keras.losses.BinaryCrossentropy
        keras.losses.Reduction.NONE keras.optimizers.SGD nn.compute_average_loss
        tpu.experimental.initialize_tpu_system""",
    "input": """
        TensorShape __version__ config.LogicalDeviceConfiguration config.list_logical_devices
        config.list_physical_devices config.set_logical_device_configuration constant data.AUTOTUNE
        data.Dataset.from_generator data.Dataset.from_tensor_slices data.Dataset.from_tensors
        data.Dataset.list_files data.Dataset.range data.Options data.TFRecordDataset
        data.experimental.AutoShardPolicy.DATA distribute.MirroredStrategy
        distribute.experimental.ParameterServerStrategy float32 function keras.layers.IntegerLookup
        keras.layers.StringLookup keras.utils.experimental.DatasetCreator print range""",
    "keras": """
        __version__ cast distribute.MirroredStrategy float32 keras.Sequential keras.callbacks.Callback
        keras.callbacks.LearningRateScheduler keras.callbacks.ModelCheckpoint keras.callbacks.TensorBoard
        keras.layers.Conv2D keras.layers.Dense keras.layers.Flatten keras.layers.MaxPooling2D
        keras.losses.SparseCategoricalCrossentropy keras.models.load_model keras.optimizers.Adam
        train.latest_checkpoint""",
    "multi_worker_with_ctl": """
        GradientTape Variable add_n constant data.Dataset.from_tensor_slices distribute.MultiWorkerMirroredStrategy
        distribute.ReduceOp.SUM dtypes.int64 function io.gfile.makedirs io.gfile.rmtree keras.Input
        keras.Sequential keras.datasets.mnist keras.layers.Conv2D keras.layers.Dense keras.layers.Flatten
        keras.layers.Reshape keras.losses.Reduction.NONE keras.losses.SparseCategoricalCrossentropy
        keras.metrics.SparseCategoricalAccuracy keras.optimizers.RMSprop keras.regularizers.L2
        nn.compute_average_loss nn.scale_regularization_loss train.Checkpoint train.CheckpointManager
        train.ClusterSpec train.latest_checkpoint""",
    "multi_worker_with_keras": """
        data.Dataset.from_tensor_slices data.Options data.experimental.AutoShardPolicy.OFF
        distribute.MultiWorkerMirroredStrategy distribute.experimental.CommunicationImplementation.NCCL
        distribute.experimental.CommunicationOptions io.gfile.makedirs io.gfile.rmtree keras.Sequential
        keras.callbacks.BackupAndRestore keras.datasets.mnist keras.layers.Conv2D keras.layers.Dense
        keras.layers.Flatten keras.layers.InputLayer keras.layers.Reshape
        keras.losses.SparseCategoricalCrossentropy keras.models.load_model keras.optimizers.SGD train.Checkpoint
        train.CheckpointManager train.latest_checkpoint""",
    "parameter_server_training": """
        GradientTape add_n cast compat.v1.ConfigProto data.Dataset.from_tensor_slices
        distribute.ParameterServerStrategy distribute.ReduceOp.SUM distribute.Server
        distribute.cluster_resolver.SimpleClusterResolver distribute.cluster_resolver.TFConfigClusterResolver
        distribute.coordinator.ClusterCoordinator distribute.experimental.partitioners.MinSizePartitioner
        errors.OpError function greater int64 keras.Model keras.callbacks.BackupAndRestore
        keras.callbacks.ModelCheckpoint keras.callbacks.TensorBoard keras.layers.Dense keras.layers.Embedding
        keras.layers.Input keras.layers.StringLookup keras.losses.BinaryCrossentropy keras.losses.Reduction.NONE
        keras.metrics.Accuracy keras.models.Sequential keras.optimizers.legacy.RMSprop keras.optimizers.legacy.SGD
        keras.regularizers.L2 nn.compute_average_loss nn.scale_regularization_loss random.uniform reduce_mean
        string train.Checkpoint train.CheckpointManager train.ClusterSpec train.checkpoints_iterator""",
    "save_and_load": """
        cast data.Dataset.from_tensors distribute.MirroredStrategy distribute.OneDeviceStrategy dtypes.float32
        float32 keras.Model keras.Sequential keras.layers.Conv2D keras.layers.Dense keras.layers.Flatten
        keras.layers.Input keras.layers.MaxPooling2D keras.losses.SparseCategoricalCrossentropy
        keras.models.load_model keras.optimizers.Adam metrics.SparseCategoricalAccuracy range
        saved_model.LoadOptions saved_model.SaveOptions saved_model.load saved_model.save""",
}

# Names that refuse, each with the words its reason must hold (TPUs, TF 1 graphs, tf.distribute.Server, premade
# Estimators, feature columns); DatasetCreator is Keras 2's and gone from TF 2.21's tf.keras as well.
REFUSED = {
    "compat.v1.ConfigProto": "graph mode", "config.experimental_connect_to_cluster": "TPU",
    "tpu.experimental.initialize_tpu_system": "TPU", "distribute.Server": "stratagem run",
    "estimator.LinearRegressor": "premade Estimators", "feature_column.numeric_column": "Keras 3 dropped it",
    "train.checkpoints_iterator": "does not provide it", "keras.utils.experimental.DatasetCreator": "experimental",
    # guide/data: TF 1 graphs, sparse and ragged values, TensorArray (eager code appends to a list), the CSV
    # readers and rejection resampling (each names the stratagem way).
    "Graph": "graph mode", "SparseTensor": "sparse tensors", "sparse.SparseTensor": "tf.sparse",
    "RaggedTensor": "ragged tensors", "TensorArray": "Python list", "data.experimental.CsvDataset": "TextLineDataset",
    "data.experimental.make_csv_dataset": "TextLineDataset", "data.experimental.rejection_resample": "sample_from",
}


def _resolve(path: str) -> object:
    value: object = tf
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _all_names() -> list[str]:
    return sorted({name for names in DOCUMENT_NAMES.values() for name in names.split()})


@pytest.mark.parametrize("path", _all_names())
def test_tutorial_name_resolves_or_refuses_with_its_reason(path: str) -> None:
    if path in REFUSED:
        with pytest.raises(AttributeError, match=REFUSED[path]):
            _resolve(path)
    else:
        assert _resolve(path) is not None or path == "newaxis"


def test_counts_of_the_tutorial_names() -> None:
    names = _all_names()
    assert len(names) == 153 and len(REFUSED) == 16 and set(REFUSED) <= set(names)


def test_tf2_short_namespaces_are_keras_ones_as_in_tf_2_21() -> None:
    # TF 2.21: tf.metrics is keras._tf_keras.keras.metrics (and so for losses, optimizers); TF 1's tf.metrics
    # functions are gone there too.
    assert tf.metrics is tf.keras.metrics and tf.losses is tf.keras.losses and tf.optimizers is tf.keras.optimizers
    accuracy = tf.metrics.SparseCategoricalAccuracy()
    accuracy.update_state([1, 0], [[0.2, 0.8], [0.3, 0.7]])
    assert float(accuracy.result()) == 0.5


def test_optimization_options_take_tf_2_21_switches_warn_once_and_change_no_element() -> None:
    # The field names of TF 2.21's tf.data.experimental.OptimizationOptions (dir() of an instance, TF 2.21.0).
    tf_fields = {"apply_default_optimizations", "filter_fusion", "filter_parallelization", "inject_prefetch",
                 "map_and_batch_fusion", "map_and_filter_fusion", "map_fusion", "map_parallelization",
                 "noop_elimination", "parallel_batch", "seq_interleave_prefetch", "shuffle_and_repeat_fusion"}
    options = tf.data.Options()
    # map_vectorization: a stratagem extension that acts (TF 2.0-2.5's switch name; stratagem/data/options.py).
    assert set(vars(options.experimental_optimization)) - {"_set", "_mutable", "map_vectorization"} == tf_fields
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        options.experimental_optimization.map_and_batch_fusion = False
        options.experimental_optimization.map_and_batch_fusion = True
    assert len([w for w in caught if "map_and_batch_fusion has no effect" in str(w.message)]) <= 1
    dataset = Dataset.range(6).map(lambda x: x * 2).batch(4).with_options(options)
    assert [b.tolist() for b in dataset] == [[0, 2, 4, 6], [8, 10]]
    assert dataset.options().experimental_optimization.map_and_batch_fusion is True
    with pytest.raises(ValueError, match="read-only"):
        dataset.options().experimental_optimization.map_fusion = True


def test_distributed_iterator_takes_the_input_tutorials_get_next_forms() -> None:
    # The input tutorial's loop: TF 2.21 on one replica yields [0 1 2 3], [4 5 6 7], [8], then an empty Optional.
    strategy = tf.distribute.MirroredStrategy()
    iterator = iter(strategy.experimental_distribute_dataset(tf.data.Dataset.range(9).batch(4)))
    seen = []
    for _ in range(5):
        optional = iterator.get_next_as_optional()
        if not optional.has_value():
            break
        seen.append(optional.get_value().tolist())
    assert seen == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    assert bool(optional.has_value()) is False
    with pytest.raises(ValueError, match="has no value"):
        optional.get_value()
    again = iter(strategy.experimental_distribute_dataset(tf.data.Dataset.range(9).batch(4)))
    assert again.get_next().tolist() == [0, 1, 2, 3]


def test_distributed_dataset_element_spec_leaves_the_batch_size_open() -> None:
    strategy = tf.distribute.MirroredStrategy()
    dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(100).batch(16)
    dist_dataset = strategy.experimental_distribute_dataset(dataset)
    assert dist_dataset.element_spec == (((None, 1), "float32"), ((None, 1), "float32"))
    doubled = tf.function(lambda inputs: strategy.run(lambda x: 2 * x[0], args=(inputs,)),
                          input_signature=[dist_dataset.element_spec])
    assert doubled(next(iter(dist_dataset))).tolist() == [[2.0]] * 16
