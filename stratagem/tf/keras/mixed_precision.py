"""``tf.keras.mixed_precision``: stratagem's mixed precision under Keras's names.

``set_global_policy("mixed_float16")`` before building a model trains it under ``torch.autocast`` with float32 weights,
and ``compile`` wraps the optimizer in a ``LossScaleOptimizer`` under float16, as Keras 3 does.
"""

from __future__ import annotations

from stratagem.mixed_precision import DTypePolicy, LossScaleOptimizer, Policy, global_policy, set_global_policy
from stratagem.tf._refusal import module_getattr

__all__ = ["DTypePolicy", "LossScaleOptimizer", "Policy", "global_policy", "set_global_policy"]
__getattr__ = module_getattr("tf.keras.mixed_precision")
