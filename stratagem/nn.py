"""Loss scaling for custom training loops (``tf.nn.compute_average_loss``)."""

from __future__ import annotations

import torch

from stratagem.distribute import context


def compute_average_loss(per_example_loss: torch.Tensor, sample_weight: torch.Tensor | None = None,
                         global_batch_size: int | None = None) -> torch.Tensor:
    """Scales per-example losses so that summing over replicas gives the global mean: a scalar tensor.

    Each replica returns ``sum(per_example_loss * sample_weight) / global_batch_size``. The strategy SUMS gradients
    across replicas, so the result is the gradient of the mean loss over the whole global batch, as on one device;
    dividing by the per-replica batch instead would multiply the gradient by the number of replicas.

    Args:
        per_example_loss: Loss of each example of this replica's batch.
        sample_weight: Optional weight of each example.
        global_batch_size: Examples in the step across all replicas; default this replica's batch size times
            ``num_replicas_in_sync``.

    Example:
        >>> loss = compute_average_loss(F.cross_entropy(logits, y, reduction="none"),
        ...                             global_batch_size=64)  # doctest: +SKIP
    """
    if per_example_loss.ndim == 0:
        raise ValueError(
            "per_example_loss must hold one loss per example (reduction='none'), not a scalar. "
            f"Received: per_example_loss.shape={tuple(per_example_loss.shape)}")
    if sample_weight is not None and sample_weight.numel() == per_example_loss.shape[0]:
        # One weight per example, shaped (B,) or (B, 1): align it with the losses instead of broadcasting (B,) against
        # (B, 1) into (B, B).
        sample_weight = sample_weight.reshape(per_example_loss.shape[0], *([1] * (per_example_loss.ndim - 1)))
    losses = per_example_loss if sample_weight is None else per_example_loss * sample_weight
    if global_batch_size is None:
        global_batch_size = per_example_loss.shape[0] * context.get_strategy().num_replicas_in_sync
    if global_batch_size <= 0:
        raise ValueError(f"global_batch_size must be positive. Received: global_batch_size={global_batch_size}")
    return losses.sum() / global_batch_size
