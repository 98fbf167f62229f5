"""Mixed precision with Keras 3's names (``keras.mixed_precision``).

After ``set_global_policy("mixed_bfloat16" | "mixed_float16")``, a ``Model``'s steps run under ``torch.autocast`` with
float32 parameters, gradients and optimizer state; ``"mixed_float16"`` adds dynamic loss scaling.
"""

from __future__ import annotations

from stratagem.mixed_precision.loss_scale_optimizer import LossScaleOptimizer
from stratagem.mixed_precision.policy import DTypePolicy, Policy, autocast, global_policy, set_global_policy

__all__ = ["DTypePolicy", "Policy", "LossScaleOptimizer", "autocast", "global_policy", "set_global_policy"]
