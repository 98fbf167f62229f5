"""``horovod.torch``'s API on torch.distributed: ``import stratagem.horovod as hvd``.

Horovod's PyTorch binding does not build against recent torch; its scripts run here with the import line changed and
``stratagem run -np N`` (or ``-H``, ``--hostfile``) for ``horovodrun``. ``hvd.elastic`` is imported on first use.
Differences from Horovod are listed in ``ops`` and in each function's docstring.
"""

from __future__ import annotations

from stratagem import _lazy_imports

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


# Submodules (hvd.elastic, Horovod's elastic API) are imported on first use, as `import horovod.torch.elastic`.
__getattr__, __dir__ = _lazy_imports.hooks(__name__, globals(), {})
