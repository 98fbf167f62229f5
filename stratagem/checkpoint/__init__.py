"""Checkpoint files: atomic writes, safe loads, and the training state behind backup-and-restore."""

from stratagem.checkpoint.io import latest_checkpoint, load_state, save_state

__all__ = ["latest_checkpoint", "load_state", "save_state"]
