"""``InputContext`` and the per-replica batch arithmetic the pipelines and the strategies share."""

from __future__ import annotations

from dataclasses import dataclass

from stratagem.errors import ConfigurationError


@dataclass(frozen=True)
class InputContext:
    """Describes the input pipeline of this process (``tf.distribute.InputContext``).

    Args:
        num_input_pipelines: Number of input pipelines in the job (one per process).
        input_pipeline_id: Index of this process's pipeline, in ``[0, num_input_pipelines)``.
        num_replicas_in_sync: Number of replicas taking part in each step.

    Example:
        >>> ctx = InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2)
        >>> ctx.get_per_replica_batch_size(64)
        32
    """

    num_input_pipelines: int = 1
    input_pipeline_id: int = 0
    num_replicas_in_sync: int = 1

    def __post_init__(self) -> None:
        if self.num_input_pipelines < 1 or self.num_replicas_in_sync < 1:
            raise ValueError(
                "num_input_pipelines and num_replicas_in_sync must be at least 1. Received: "
                f"num_input_pipelines={self.num_input_pipelines}, num_replicas_in_sync={self.num_replicas_in_sync}")
        if not 0 <= self.input_pipeline_id < self.num_input_pipelines:
            raise ValueError(
                f"input_pipeline_id must be in [0, {self.num_input_pipelines}). "
                f"Received: input_pipeline_id={self.input_pipeline_id}")

    def get_per_replica_batch_size(self, global_batch_size: int) -> int:
        """Returns ``global_batch_size // num_replicas_in_sync``.

        Raises:
            ConfigurationError: If the global batch does not divide evenly.
        """
        check_global_batch_size(global_batch_size, self.num_replicas_in_sync)
        return global_batch_size // self.num_replicas_in_sync


def check_global_batch_size(global_batch_size: int, num_replicas_in_sync: int) -> None:
    """Raises ``ConfigurationError`` unless the global batch splits evenly over the replicas."""
    if global_batch_size < 1:
        raise ValueError(f"global_batch_size must be positive. Received: global_batch_size={global_batch_size}")
    if global_batch_size % num_replicas_in_sync:
        raise ConfigurationError(
            "global_batch_size must be divisible by num_replicas_in_sync so every replica gets "
            f"the same batch. Received: global_batch_size={global_batch_size}, "
            f"num_replicas_in_sync={num_replicas_in_sync}. Use a multiple of {num_replicas_in_sync}.")


def replica_slice(batch_size: int, num_replicas: int, replica_id: int) -> slice:
    """Rows of a global batch that belong to ``replica_id``.

    Rows are split into contiguous, nearly equal parts (the first ``batch_size % num_replicas`` replicas get one
    more row), so every row goes to exactly one replica. A short final batch therefore still counts each example
    once.
    """
    base, extra = divmod(batch_size, num_replicas)
    start = replica_id * base + min(replica_id, extra)
    stop = start + base + (1 if replica_id < extra else 0)
    return slice(start, stop)
