"""``tf.GradientTape`` on torch autograd: gradients of what ran inside the ``with`` block.

torch records the operations itself: the tape turns recording on inside its block, marks ``watch``ed tensors as
requiring gradients and asks ``torch.autograd.grad``. Variables stand for their torch value. As in TF, summing across
replicas is ``optimizer.apply_gradients``'s job inside ``strategy.run``, not the tape's.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from typing import Any

import torch

from stratagem._nest import map_structure
from stratagem.distribute.values import parse_enum
from stratagem.tf._tensor import unwrap

__all__ = ["GradientTape", "UnconnectedGradients"]


class UnconnectedGradients(str, enum.Enum):
    """What ``gradient`` returns for a source the target does not depend on (``tf.UnconnectedGradients``)."""

    NONE = "none"
    ZERO = "zero"


def torch_value(source: Any) -> Any:
    """The torch tensor a source stands for: a tensor itself, or a variable's (Keras, ``tf.Variable``) value."""
    value = unwrap(source)
    return value if isinstance(value, torch.Tensor) else None


class GradientTape:
    """Records operations inside its ``with`` block for automatic differentiation (``tf.GradientTape``).

    Trainable variables are watched whenever used; other tensors with ``tape.watch(x)`` before use.

    Args:
        persistent: If True, ``gradient`` may be called more than once (the graph is kept).
        watch_accessed_variables: If False, only the sources passed to ``watch`` get gradients; every other source gets
            None (or zeros, see ``gradient``).

    Example:
        >>> x = torch.tensor(3.0)
        >>> with GradientTape() as tape:
        ...     tape.watch(x)
        ...     y = x * x
        >>> float(tape.gradient(y, x))
        6.0
    """

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True) -> None:
        self._persistent = bool(persistent)
        self._watch_accessed_variables = bool(watch_accessed_variables)
        self._watched: dict[int, torch.Tensor] = {}  # id -> tensor; the tensors are kept so ids stay unique
        self._recording: torch.enable_grad | None = None
        self._used = False

    def __enter__(self) -> GradientTape:
        self._recording = torch.enable_grad()  # a tape inside torch.no_grad() still records, as in TF
        self._recording.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        recording, self._recording = self._recording, None
        if recording is not None:
            recording.__exit__(None, None, None)

    def watch(self, tensor: Any) -> None:
        """Records operations on ``tensor`` (or a nested structure) from now on; integer tensors raise ValueError."""
        map_structure(self._watch_one, tensor)

    def _watch_one(self, source: Any) -> None:
        tensor = torch_value(source)
        if tensor is None:
            raise TypeError(f"GradientTape.watch takes tensors and variables. Received: {type(source).__name__}")
        if not (tensor.is_floating_point() or tensor.is_complex()):
            raise ValueError("GradientTape.watch needs a floating-point tensor: integer tensors have no gradient. Cast "
                             f"it first (tf.cast(x, tf.float32)). Received: dtype={tensor.dtype}")
        if not tensor.requires_grad:
            # NOTE: torch records a tensor only if it requires gradients; a tensor computed without
            # gradients is a leaf, so this is allowed and the flag stays on the caller's tensor.
            tensor.requires_grad_(True)
        self._watched[id(tensor)] = tensor

    @contextlib.contextmanager
    def stop_recording(self) -> Iterator[None]:
        """Operations inside this block are not recorded (``torch.no_grad``)."""
        with torch.no_grad():
            yield

    def reset(self) -> None:
        """Forgets the watched tensors; gradients of what ran before cannot be asked for any more."""
        self._watched.clear()
        self._used = False

    def watched_variables(self) -> tuple[torch.Tensor, ...]:
        """The tensors passed to ``watch`` (variables used in the block are watched by torch, not listed here)."""
        return tuple(self._watched.values())

    def gradient(self, target: Any, sources: Any, output_gradients: Any = None,
                 unconnected_gradients: UnconnectedGradients | str = UnconnectedGradients.NONE) -> Any:
        """Gradients of ``target`` with respect to each of ``sources``, in the structure of ``sources``.

        A non-scalar target, or a list, is differentiated as the sum of its elements, as in TF.

        Args:
            target: A tensor, or a nested structure of tensors.
            sources: A variable, tensor, or nested structure (list, tuple, dict) of them.
            output_gradients: Optional gradients of the target(s), one per target.
            unconnected_gradients: What a source the target does not depend on gets: ``"none"`` (None) or ``"zero"``
                (zeros).

        Returns:
            Torch tensors (or None) in the structure of ``sources``.

        Raises:
            RuntimeError: If a non-persistent tape is asked a second time.
        """
        unconnected = parse_enum(UnconnectedGradients, unconnected_gradients, "unconnected gradients")
        self._check_reusable("gradient")
        targets = [t for t in _flatten(target) if isinstance(t, torch.Tensor)]
        leaves = _flatten(sources)
        tensors = [torch_value(s) for s in leaves]
        for leaf, tensor in zip(leaves, tensors):
            if tensor is None:
                raise TypeError(f"GradientTape.gradient sources must be variables or tensors. Received: "
                                f"{type(leaf).__name__}")
        wanted = [i for i, t in enumerate(tensors) if self._differentiable(t)]
        grads: list[torch.Tensor | None] = [None] * len(tensors)
        live = [t for t in targets if t.requires_grad]
        if live and wanted:
            seeds = _output_gradients(output_gradients, targets, live)
            computed = torch.autograd.grad(live, [tensors[i] for i in wanted], grad_outputs=seeds,
                                           retain_graph=self._persistent, allow_unused=True)
            for i, grad in zip(wanted, computed):
                grads[i] = grad
        if unconnected is UnconnectedGradients.ZERO:
            grads = [torch.zeros_like(t) if g is None else g for g, t in zip(grads, tensors)]
        return _pack(sources, iter(grads))

    def jacobian(self, target: torch.Tensor, sources: Any,
                 unconnected_gradients: UnconnectedGradients | str = UnconnectedGradients.NONE) -> Any:
        """The Jacobian of ``target`` for each source, ``target.shape + source.shape``; a backward pass per element."""
        unconnected = parse_enum(UnconnectedGradients, unconnected_gradients, "unconnected gradients")
        self._check_reusable("jacobian")
        leaves = _flatten(sources)
        tensors = [torch_value(s) for s in leaves]
        wanted = [i for i, t in enumerate(tensors) if t is not None and self._differentiable(t)]
        rows: list[list[torch.Tensor | None]] = []
        flat = target.reshape(-1)
        for k in range(flat.numel()):
            if not flat.requires_grad or not wanted:
                rows.append([None] * len(wanted))
                continue
            rows.append(list(torch.autograd.grad(flat[k], [tensors[i] for i in wanted], retain_graph=True,
                                                 allow_unused=True)))
        out: list[torch.Tensor | None] = [None] * len(tensors)
        for j, i in enumerate(wanted):
            column = [row[j] for row in rows]
            if all(g is None for g in column):
                continue
            stacked = torch.stack([torch.zeros_like(tensors[i]) if g is None else g for g in column])
            out[i] = stacked.reshape(*target.shape, *tensors[i].shape)
        if unconnected is UnconnectedGradients.ZERO:
            out = [torch.zeros(*target.shape, *t.shape, dtype=t.dtype) if g is None and t is not None else g
                   for g, t in zip(out, tensors)]
        return _pack(sources, iter(out))

    def _differentiable(self, tensor: torch.Tensor) -> bool:
        if not tensor.requires_grad:
            return False  # an integer tensor, a frozen weight, or a tensor never watched
        return self._watch_accessed_variables or id(tensor) in self._watched

    def _check_reusable(self, what: str) -> None:
        if self._used and not self._persistent:
            raise RuntimeError("A non-persistent GradientTape can compute gradients only once (torch frees the "
                               "recorded graph after the first backward pass). Create it with "
                               f"tf.GradientTape(persistent=True) to call {what} more than once.")
        self._used = True


def _flatten(structure: Any) -> list[Any]:
    leaves: list[Any] = []
    map_structure(leaves.append, structure)
    return leaves


def _pack(structure: Any, values: Iterator[Any]) -> Any:
    return map_structure(lambda _: next(values), structure)


def _output_gradients(output_gradients: Any, targets: list[torch.Tensor],
                      live: list[torch.Tensor]) -> list[torch.Tensor]:
    """One seed per live target: the given output gradients, else ones (the gradient of the sum)."""
    if output_gradients is None:
        return [torch.ones_like(t) for t in live]
    given = [torch.as_tensor(g) for g in _flatten(output_gradients)]
    if len(given) != len(targets):
        raise ValueError(f"output_gradients must hold one tensor per target. Received: {len(given)} output "
                         f"gradients for {len(targets)} targets")
    by_id = {id(t): g for t, g in zip(targets, given)}
    return [by_id[id(t)].to(t.dtype).expand_as(t) for t in live]
