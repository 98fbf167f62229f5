"""``tf.io``: ``read_file``/``write_file``, ``tf.io.gfile`` (the local file system), and TFRecord files and
``tf.train.Example`` parsing (``stratagem.io``'s)."""

from __future__ import annotations

import os
from typing import Any

from stratagem.io import (
    FixedLenFeature, FixedLenSequenceFeature, TFRecordOptions, TFRecordWriter, VarLenFeature, decode_raw, parse_example,
    parse_single_example, read_file,
)
from stratagem.tf._refusal import module_getattr
from stratagem.tf.io import gfile
from stratagem.tf.image import decode_image, decode_jpeg, decode_png


def write_file(filename: Any, contents: bytes | str, name: str | None = None) -> None:
    """``tf.io.write_file``: writes ``contents`` (str is utf-8 encoded)."""
    path = os.fsdecode(filename) if isinstance(filename, bytes) else os.fspath(filename)
    with open(path, "wb") as file:
        file.write(contents.encode() if isinstance(contents, str) else bytes(contents))


__getattr__ = module_getattr("tf.io")
__all__ = ["FixedLenFeature", "FixedLenSequenceFeature", "TFRecordOptions", "TFRecordWriter", "VarLenFeature",
           "decode_image", "decode_jpeg", "decode_png", "decode_raw", "gfile", "parse_example", "parse_single_example",
           "read_file", "write_file"]
