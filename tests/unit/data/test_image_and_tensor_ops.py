"""The tf.image / tf.io / tf.strings / tf.lookup / tf.one_hot ops seed 004's input function uses, and
tf.data.experimental's map_and_batch and shuffle_and_repeat.

Expected values are TF's documented ones (dtype rules of convert_image_dtype,
TF 2's half-pixel bilinear resize, one_hot's all-zero row out of range).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import stratagem
from stratagem.data import Dataset
from stratagem.testing.data import assert_checkpoint_roundtrip


def _png_bytes(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def test_decode_png_returns_the_exact_pixels_channels_last() -> None:
    pixels = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3) * 7
    image = stratagem.image.decode_png(_png_bytes(pixels))
    assert image.dtype == torch.uint8 and image.shape == (2, 3, 3)
    np.testing.assert_array_equal(image.numpy(), pixels)
    gray = stratagem.image.decode_png(_png_bytes(pixels), channels=1)
    assert gray.shape == (2, 3, 1)


def test_decode_jpeg_of_a_file_read_with_read_file(tmp_path: Path) -> None:
    from PIL import Image

    path = tmp_path / "a.jpeg"
    Image.fromarray(np.full((5, 7, 3), 120, np.uint8)).save(path, format="JPEG")
    contents = stratagem.io.read_file(os.fsencode(path))  # list_files yields bytes
    image = stratagem.image.decode_jpeg(contents, channels=3)
    assert image.shape == (5, 7, 3) and image.dtype == torch.uint8
    assert abs(int(image.float().mean()) - 120) <= 2  # JPEG is lossy


def test_decode_of_bad_bytes_raises_with_received() -> None:
    with pytest.raises(ValueError, match="Cannot decode the image.*Received"):
        stratagem.image.decode_jpeg(b"not an image")
    with pytest.raises(ValueError, match="channels must be"):
        stratagem.image.decode_jpeg(b"", channels=2)


def test_convert_image_dtype_scales_as_tf() -> None:
    as_float = stratagem.image.convert_image_dtype(torch.tensor([0, 51, 255], dtype=torch.uint8), torch.float32)
    torch.testing.assert_close(as_float, torch.tensor([0.0, 0.2, 1.0]))
    # float -> uint8 multiplies by 255.5 and truncates: 0.5 -> 127, 1.0 -> 255
    back = stratagem.image.convert_image_dtype(torch.tensor([0.0, 0.5, 1.0]), torch.uint8)
    assert back.tolist() == [0, 127, 255]
    clipped = stratagem.image.convert_image_dtype(torch.tensor([1.5]), torch.uint8, saturate=True)
    assert clipped.tolist() == [255]


def test_resize_bilinear_uses_half_pixel_centres_like_tf2() -> None:
    image = torch.tensor([[0.0, 1.0], [2.0, 3.0]]).reshape(2, 2, 1)
    out = stratagem.image.resize(image, (4, 4))
    # tf.image.resize([[0, 1], [2, 3]], (4, 4)) (bilinear, TF 2)
    expected = torch.tensor([[0.0, 0.25, 0.75, 1.0], [0.5, 0.75, 1.25, 1.5],
                             [1.5, 1.75, 2.25, 2.5], [2.0, 2.25, 2.75, 3.0]])
    torch.testing.assert_close(out[..., 0], expected)
    assert stratagem.image.resize(torch.zeros(3, 8, 6, 3, dtype=torch.uint8), (4, 3)).dtype == torch.float32
    with pytest.raises(ValueError, match="method must be one of"):
        stratagem.image.resize(image, (4, 4), method="bicubic")


def test_one_hot_out_of_range_index_is_an_all_off_row() -> None:
    out = stratagem.one_hot(torch.tensor([0, 2, -1, 3]), 3)
    assert out.dtype == torch.float32
    assert out.tolist() == [[1, 0, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0]]
    assert stratagem.one_hot([1], 2, on_value=5.0, off_value=-1.0).tolist() == [[-1.0, 5.0]]


def test_strings_split_returns_bytes_pieces() -> None:
    assert stratagem.strings.split("hello world") == [b"hello", b"world"]
    assert stratagem.strings.split(b"/data/CNV/1.jpeg", os.sep)[-2] == b"CNV"
    assert stratagem.strings.split(["a b", "c"]) == [[b"a", b"b"], [b"c"]]


def test_static_hash_table_maps_str_and_bytes_keys_alike() -> None:
    init = stratagem.lookup.KeyValueTensorInitializer(["CNV", "DME"], [0, 1])
    table = stratagem.lookup.StaticHashTable(init, default_value=-1)
    assert int(table.lookup(b"DME")) == 1 and int(table.lookup("CNV")) == 0
    assert int(table.lookup(b"other")) == -1
    assert table.lookup([b"DME", b"x"]).tolist() == [1, -1]
    assert table.lookup(b"DME").dtype == torch.int32  # Python ints become int32, as tf.constant makes them
    index = stratagem.lookup.index_table_from_tensor(mapping=["a", "b"])
    assert index.lookup(b"b").dtype == torch.int64 and int(index.lookup(b"b")) == 1


def test_map_and_batch_is_map_then_batch() -> None:
    fused = Dataset.range(7).apply(stratagem.data.experimental.map_and_batch(lambda x: x * 2, batch_size=3))
    plain = Dataset.range(7).map(lambda x: x * 2).batch(3)
    assert [b.tolist() for b in fused] == [b.tolist() for b in plain]
    dropped = Dataset.range(7).apply(stratagem.data.experimental.map_and_batch(lambda x: x, 3, drop_remainder=True))
    assert len(list(dropped)) == 2
    with pytest.raises(ValueError, match="not both"):
        stratagem.data.experimental.map_and_batch(lambda x: x, 3, num_parallel_batches=1, num_parallel_calls=2)


def test_shuffle_and_repeat_gives_count_permutations_and_restores() -> None:
    ds = Dataset.range(5).apply(stratagem.data.experimental.shuffle_and_repeat(5, count=3, seed=1))
    values = [int(v) for v in ds]
    passes = [values[i:i + 5] for i in range(0, 15, 5)]
    assert len(values) == 15 and all(sorted(p) == list(range(5)) for p in passes)
    assert passes[0] != passes[1] or passes[1] != passes[2]  # reshuffled each pass
    assert_checkpoint_roundtrip(ds)


def test_seed_004_input_fn_yields_images_and_one_hot_folder_labels(tmp_path: Path) -> None:
    from examples.estimator_image_folder import LABELS, input_fn, make_image_folder

    make_image_folder(str(tmp_path), images_per_class=2)
    pattern = os.path.join(str(tmp_path), "train", "**", "*.jpeg")
    batches = list(input_fn(pattern, LABELS, image_size=(16, 16), batch_size=3, num_epochs=1))
    features, labels = batches[0]
    assert set(features) == {"input_1"} and features["input_1"].shape == (3, 16, 16, 3)
    assert features["input_1"].dtype == torch.float32 and 0.0 <= float(features["input_1"].min())
    assert float(features["input_1"].max()) <= 1.0
    all_labels = torch.cat([b[1] for b in batches])
    # sorted file names: two per class, classes in folder order
    assert all_labels.argmax(dim=1).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert all_labels.sum(dim=1).tolist() == [1.0] * 8
