"""Checkpoint files: atomic writes, safe loads, sharded checkpoints, and the one training-state format (``state``)."""

from stratagem import _lazy_imports
from stratagem.checkpoint.io import latest_checkpoint, load_state, save_state

# torch.distributed.checkpoint takes seconds to import: the sharded pieces load on first use.
__getattr__, __dir__ = _lazy_imports.hooks(__name__, globals(), dict.fromkeys(
    ["ShardedCheckpoint", "save_sharded", "load_sharded"], "stratagem.checkpoint.sharded"))


__all__ = ["ShardedCheckpoint", "latest_checkpoint", "load_sharded", "load_state", "save_sharded", "save_state"]
