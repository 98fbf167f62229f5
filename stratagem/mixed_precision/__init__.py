"""Mixed precision with Keras 3's names (``keras.mixed_precision``).

``set_global_policy("mixed_bfloat16" | "mixed_float16" | "float32")`` before
building a ``Model``; its steps then compute under ``torch.autocast`` while its
parameters, gradients and optimizer state stay float32. ``"mixed_float16"``
adds dynamic loss scaling (``LossScaleOptimizer``). Modules: ``policy``,
``loss_scale_optimizer``.
"""

from __future__ import annotations

from stratagem.mixed_precision.loss_scale_optimizer import LossScaleOptimizer
from stratagem.mixed_precision.policy import DTypePolicy, Policy, autocast, global_policy, set_global_policy

__all__ = ["DTypePolicy", "Policy", "LossScaleOptimizer", "autocast", "global_policy", "set_global_policy"]
