"""Keras' dtype policies: which dtype layers compute in, and which their variables are kept in.

Only ``"float32"`` and the two mixed policies exist: a pure ``"float16"``/``"bfloat16"`` policy would need the module
converted, which stratagem does not do.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import torch

__all__ = ["DTypePolicy", "Policy", "set_global_policy", "global_policy", "autocast"]

_COMPUTE = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}


class DTypePolicy:
    """A dtype policy (``keras.mixed_precision.DTypePolicy``, alias ``Policy``).

    Args:
        name: ``"float32"``, ``"mixed_float16"`` or ``"mixed_bfloat16"``.

    Example:
        >>> policy = DTypePolicy("mixed_bfloat16")
        >>> policy.compute_dtype, policy.variable_dtype
        ('bfloat16', 'float32')
    """

    def __init__(self, name: str | None = None) -> None:
        name = "float32" if name is None else name
        if not isinstance(name, str) or name not in _COMPUTE:
            raise ValueError(f"Unknown dtype policy. Expected one of {sorted(_COMPUTE)}: stratagem keeps variables in "
                             "float32 and computes under torch.autocast, so a pure 'float16' or 'bfloat16' policy "
                             f"(variables in half precision too) is not available. Received: name={name!r}")
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def compute_dtype(self) -> str:
        """The dtype layers compute in: ``"float16"``, ``"bfloat16"`` or ``"float32"``."""
        return _COMPUTE[self._name]

    @property
    def variable_dtype(self) -> str:
        """The dtype of the variables: always ``"float32"`` (float32 master weights)."""
        return "float32"

    def autocast(self, device: torch.device | str) -> contextlib.AbstractContextManager[Any]:
        """``torch.autocast`` on ``device``'s type in the compute dtype; nothing under ``"float32"``."""
        if self._name == "float32":
            return contextlib.nullcontext()
        device_type = torch.device(device).type
        return torch.autocast(device_type=device_type, dtype=getattr(torch, self.compute_dtype))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DTypePolicy) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self._name)

    def __repr__(self) -> str:
        return f'<DTypePolicy "{self._name}">'


Policy = DTypePolicy  # Keras 3 keeps the Keras 2 name as an alias

# NOTE: a process-wide setting, as in Keras (keras.mixed_precision.set_global_policy); it is read
# when a Model is built, never during a step, so changing it later affects new models only.
_lock = threading.Lock()
_global: list[DTypePolicy] = [DTypePolicy("float32")]


def set_global_policy(policy: DTypePolicy | str | None) -> None:
    """Sets the policy of models built from now on (``keras.mixed_precision.set_global_policy``).

    Args:
        policy: A ``DTypePolicy`` or its name; ``None`` restores ``"float32"``.

    Example:
        >>> set_global_policy("mixed_bfloat16")
        >>> global_policy().compute_dtype
        'bfloat16'
        >>> set_global_policy("float32")
    """
    resolved = policy if isinstance(policy, DTypePolicy) else DTypePolicy(policy)
    with _lock:
        _global[0] = resolved


def global_policy() -> DTypePolicy:
    """The policy models built now get (``keras.mixed_precision.global_policy``)."""
    return _global[0]


def autocast(device: torch.device | str) -> contextlib.AbstractContextManager[Any]:
    """The global policy's ``torch.autocast`` on ``device`` (for custom training loops).

    Example:
        >>> with autocast("cpu"):  # doctest: +SKIP
        ...     loss = loss_fn(y, module(x).float())
    """
    return global_policy().autocast(device)
