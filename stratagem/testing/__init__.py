"""Test helpers for code that runs on several replicas."""

from stratagem.testing.multiprocess import run_workers

__all__ = ["run_workers"]
