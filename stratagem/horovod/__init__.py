"""``horovod.torch``'s API on torch.distributed: ``import stratagem.horovod as hvd``.

Horovod's PyTorch binding does not build against recent torch; scripts written
for it run here with the import line changed and ``stratagem run -np N``
(or ``-H host1:2,host2:2``, ``--hostfile``) in place of ``horovodrun``.
Modules: ``basics`` (init, ranks, process sets), ``ops`` (collectives),
``grouped`` (grouped and sparse collectives), ``exceptions``, ``compression``, ``optimizer`` (``DistributedOptimizer``),
``broadcast`` (parameters, optimizer state), ``objects`` (objects without
pickle), ``sync_batch_norm``. ``hvd.elastic`` is the elastic-training
submodule, imported on first use. Differences from Horovod are listed in
``ops`` and in each function's docstring.
"""

from __future__ import annotations

import importlib
from typing import Any

from stratagem.horovod.basics import (
    ProcessSet, add_process_set, ccl_built, cross_rank, cross_size, cuda_built, ddl_built, global_process_set,
    gloo_built, gloo_enabled, init, is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
    mpi_threads_supported, nccl_built, rank, remove_process_set, rocm_built, shutdown, size,
)
from stratagem.horovod.broadcast import broadcast_optimizer_state, broadcast_parameters
from stratagem.horovod.compression import Compression, Compressor
from stratagem.horovod.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from stratagem.horovod.grouped import (
    grouped_allgather, grouped_allgather_async, grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
    grouped_allreduce_async_, grouped_reducescatter, grouped_reducescatter_async, sparse_allreduce_async,
)
from stratagem.horovod.objects import allgather_object, broadcast_object
from stratagem.horovod.ops import (
    Adasum, Average, Max, Min, Product, ReduceOp, Sum, allgather, allgather_async, allreduce, allreduce_,
    allreduce_async, allreduce_async_, alltoall, alltoall_async, barrier, broadcast, broadcast_, broadcast_async,
    broadcast_async_, join, poll, reducescatter, reducescatter_async, synchronize,
)
from stratagem.horovod.optimizer import DistributedOptimizer
from stratagem.horovod.sync_batch_norm import SyncBatchNorm

__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size", "cross_rank",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built", "gloo_enabled", "nccl_built", "cuda_built",
    "rocm_built", "ddl_built", "ccl_built",
    "ReduceOp", "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
    "grouped_allgather", "grouped_allgather_async", "grouped_reducescatter", "grouped_reducescatter_async",
    "sparse_allreduce_async", "HorovodInternalError", "HostsUpdatedInterrupt",
    "allgather", "allgather_async", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "alltoall", "alltoall_async", "reducescatter", "reducescatter_async", "join", "barrier", "poll", "synchronize",
    "Compression", "Compressor", "DistributedOptimizer", "broadcast_parameters", "broadcast_optimizer_state",
    "broadcast_object", "allgather_object", "SyncBatchNorm",
]


def __getattr__(name: str) -> Any:
    # hvd.elastic (Horovod's elastic API) is a submodule loaded on first use, as `import horovod.torch.elastic`.
    if name == "elastic":
        return importlib.import_module("stratagem.horovod.elastic")
    raise AttributeError(f"module 'stratagem.horovod' has no attribute {name!r}")
