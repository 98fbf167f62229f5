"""``tf.errors``: TF's exception classes, for ``except`` clauses of ported code.

Each also derives from the matching Python exception (``NotFoundError`` is a ``FileNotFoundError``). An exhausted
iterator raises ``StopIteration``, as TF 2's do.
"""

from __future__ import annotations

from stratagem.errors import DataLossError  # raised by TFRecordDataset for a damaged record, under TF's name
from stratagem.tf._refusal import module_getattr


class OpError(Exception):
    """``tf.errors.OpError``: the base of TF's op errors."""


class InvalidArgumentError(OpError, ValueError):
    """``tf.errors.InvalidArgumentError``."""


class NotFoundError(OpError, FileNotFoundError):
    """``tf.errors.NotFoundError``: a file or directory does not exist."""


class AlreadyExistsError(OpError, FileExistsError):
    """``tf.errors.AlreadyExistsError``: the target exists and overwriting was not asked for."""


class OutOfRangeError(OpError, StopIteration):
    """``tf.errors.OutOfRangeError``: an iterator has no more elements."""


class UnimplementedError(OpError, NotImplementedError):
    """``tf.errors.UnimplementedError``."""


__getattr__ = module_getattr("tf.errors")
__all__ = ["AlreadyExistsError", "DataLossError", "InvalidArgumentError", "NotFoundError", "OpError", "OutOfRangeError",
           "UnimplementedError"]
