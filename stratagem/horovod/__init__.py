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

# Each module's public names are hvd's (Horovod's horovod.torch names); ops comes after the broadcast module, so
# hvd.broadcast is the collective.
from stratagem.horovod import basics as _basics, grouped as _grouped, ops as _ops
from stratagem.horovod.basics import *  # noqa: F403
from stratagem.horovod.broadcast import broadcast_optimizer_state, broadcast_parameters
from stratagem.horovod.compression import Compression, Compressor
from stratagem.horovod.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from stratagem.horovod.grouped import *  # noqa: F403
from stratagem.horovod.objects import allgather_object, broadcast_object
from stratagem.horovod.ops import *  # noqa: F403
from stratagem.horovod.optimizer import DistributedOptimizer
from stratagem.horovod.sync_batch_norm import SyncBatchNorm

__all__ = [
    *_basics.__all__, *_ops.__all__, *_grouped.__all__, "HorovodInternalError", "HostsUpdatedInterrupt",
    "Compression", "Compressor", "DistributedOptimizer", "broadcast_parameters", "broadcast_optimizer_state",
    "broadcast_object", "allgather_object", "SyncBatchNorm",
]


def __getattr__(name: str) -> Any:
    # hvd.elastic (Horovod's elastic API) is a submodule loaded on first use, as `import horovod.torch.elastic`.
    if name == "elastic":
        return importlib.import_module("stratagem.horovod.elastic")
    raise AttributeError(f"module 'stratagem.horovod' has no attribute {name!r}")
