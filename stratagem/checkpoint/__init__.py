"""Checkpoint files: atomic writes, safe loads, sharded checkpoints, and the one training-state format (``state``)."""

from stratagem.checkpoint.io import latest_checkpoint, load_state, save_state

# torch.distributed.checkpoint takes seconds to import: the sharded pieces load on first use.
_LAZY = {"ShardedCheckpoint", "save_sharded", "load_sharded"}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        from stratagem.checkpoint import sharded

        return getattr(sharded, name)
    raise AttributeError(f"module 'stratagem.checkpoint' has no attribute {name!r}")


__all__ = ["ShardedCheckpoint", "latest_checkpoint", "load_sharded", "load_state", "save_sharded", "save_state"]
