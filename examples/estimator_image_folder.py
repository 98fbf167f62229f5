"""Seed 004's Retinal-OCT recipe: an image-folder ``input_fn`` and ``model_to_estimator`` on 2 replicas.

The input function is the seed's, line for line, with ``tf.`` replaced by
``stratagem.`` (TF 2 homes of the ops: ``tf.read_file`` -> ``stratagem.io.read_file``,
``tf.string_split`` -> ``stratagem.strings.split``, ``tf.image.resize_images``
-> ``stratagem.image.resize``, ``tf.contrib.data`` -> ``stratagem.data.experimental``).
The OCT images are replaced by a small generated image folder (one class per
subfolder, JPEGs written by Pillow), and VGG16 by a small CNN that takes the
seed's ``{"input_1": image}`` features, channels last.

    python examples/estimator_image_folder.py --steps 20
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np
import torch
from torch import nn

import stratagem

LABELS = ["CNV", "DME", "DRUSEN", "NORMAL"]
IMAGE_SIZE = (32, 32)


def input_fn(file_pattern, labels,
             image_size=(224, 224),
             shuffle=False,
             batch_size=64,
             num_epochs=None,
             buffer_size=4096,
             prefetch_buffer_size=4):
    """Seed 004's input_fn; only the prefixes (and the TF 2 op names) changed."""
    table = stratagem.lookup.index_table_from_tensor(mapping=labels)
    num_classes = len(labels)

    def _map_func(filename):
        label = stratagem.strings.split(filename, os.sep)[-2]
        image = stratagem.image.decode_jpeg(stratagem.io.read_file(filename), channels=3)
        image = stratagem.image.convert_image_dtype(image, dtype=torch.float32)
        image = stratagem.image.resize(image, size=image_size)
        return ({"input_1": image}, stratagem.one_hot(table.lookup(label), num_classes))

    dataset = stratagem.data.Dataset.list_files(file_pattern, shuffle=shuffle)

    if num_epochs is not None and shuffle:
        dataset = dataset.apply(stratagem.data.experimental.shuffle_and_repeat(buffer_size, num_epochs))
    elif shuffle:
        dataset = dataset.shuffle(buffer_size)
    elif num_epochs is not None:
        dataset = dataset.repeat(num_epochs)

    dataset = dataset.apply(stratagem.data.experimental.map_and_batch(map_func=_map_func,
                                                                     batch_size=batch_size,
                                                                     num_parallel_calls=os.cpu_count()))
    dataset = dataset.prefetch(buffer_size=prefetch_buffer_size)

    return dataset


def make_image_folder(root: str, images_per_class: int = 8, seed: int = 0) -> str:
    """Writes ``root/train/<label>/*.jpeg`` and ``root/test/...``: each class a noisy image of its own colour."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    colours = np.array([[200, 40, 40], [40, 200, 40], [40, 40, 200], [200, 200, 40]], dtype=np.float64)
    for split, count in (("train", images_per_class), ("test", max(2, images_per_class // 2))):
        for index, label in enumerate(LABELS):
            folder = os.path.join(root, split, label)
            os.makedirs(folder, exist_ok=True)
            for i in range(count):
                path = os.path.join(folder, f"{i:03d}.jpeg")
                if os.path.exists(path):
                    continue  # every replica re-runs this script: write each file once
                pixels = colours[index] + rng.normal(0, 30, size=(40, 48, 3))
                tmp = f"{path}.{os.getpid()}.tmp"
                Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(tmp, format="JPEG")
                os.replace(tmp, path)
    return root


class SmallCNN(nn.Module):
    """Stands in for the seed's frozen VGG16 + Dense head: ``{"input_1": (B, H, W, 3)}`` -> class probabilities."""

    def __init__(self, num_classes: int = len(LABELS)) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 8, 3), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(4), nn.Flatten())
        self.head = nn.Linear(8 * 16, num_classes)

    def forward(self, features: dict[str, torch.Tensor]) -> torch.Tensor:
        images = features["input_1"].permute(0, 3, 1, 2)  # channels last, as Keras feeds them
        return torch.softmax(self.head(self.features(images)), dim=-1)  # Dense(..., activation=softmax)


def build_model(seed: int = 0) -> stratagem.Model:
    torch.manual_seed(seed)
    model = stratagem.Model(SmallCNN(), name="oct_cnn")
    model.compile(loss="categorical_crossentropy", optimizer=stratagem.optimizers.Adam(learning_rate=0.01),
                  metrics=["accuracy"])
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "stratagem_oct_example"))
    args = parser.parse_args()
    make_image_folder(args.root)  # before the strategy line: the supervisor writes it, the replicas find it
    train_folder = os.path.join(args.root, "train", "**", "*.jpeg")
    test_folder = os.path.join(args.root, "test", "**", "*.jpeg")

    model = build_model()
    strategy = stratagem.distribute.MirroredStrategy(num_replicas=args.replicas)
    config = stratagem.estimator.RunConfig(train_distribute=strategy, save_checkpoints_steps=args.steps,
                                           model_dir=os.path.join(args.root, "model"))
    estimator = stratagem.estimator.model_to_estimator(model, config=config)
    estimator.train(input_fn=lambda: input_fn(train_folder, LABELS, image_size=IMAGE_SIZE, shuffle=True,
                                              batch_size=8, buffer_size=64, num_epochs=20),
                    steps=args.steps)
    results = estimator.evaluate(input_fn=lambda: input_fn(test_folder, LABELS, image_size=IMAGE_SIZE, shuffle=True,
                                                           batch_size=8, buffer_size=64, num_epochs=1,
                                                           prefetch_buffer_size=2))
    if strategy.is_chief:
        print(results)


if __name__ == "__main__":
    main()
