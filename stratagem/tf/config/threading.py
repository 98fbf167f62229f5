"""``tf.config.threading``: torch's intra-op (``set_num_threads``) and inter-op thread pools."""

from __future__ import annotations

import os

import torch

from stratagem.data.options import warn_once
from stratagem.tf._refusal import module_getattr


def get_intra_op_parallelism_threads() -> int:
    return torch.get_num_threads()


def set_intra_op_parallelism_threads(num_threads: int) -> None:
    """``torch.set_num_threads``; 0 means the system's choice (one per core), as in TF."""
    torch.set_num_threads(int(num_threads) or (os.cpu_count() or 1))


def get_inter_op_parallelism_threads() -> int:
    return torch.get_num_interop_threads()


def set_inter_op_parallelism_threads(num_threads: int) -> None:
    """``torch.set_num_interop_threads``; torch allows it only before its first parallel work (else one warning)."""
    try:
        torch.set_num_interop_threads(int(num_threads) or (os.cpu_count() or 1))
    except RuntimeError as error:
        warn_once("set_inter_op_parallelism_threads", "set_inter_op_parallelism_threads changed nothing: torch "
                  f"fixes its inter-op pool at its first parallel op ({error}). Call it at the start of the program.")


__getattr__ = module_getattr("tf.config.threading")
__all__ = ["get_inter_op_parallelism_threads", "get_intra_op_parallelism_threads",
           "set_inter_op_parallelism_threads", "set_intra_op_parallelism_threads"]
