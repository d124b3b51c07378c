"""The cyclic cosine learning rate (docs/protocols.md section 3), stepped every minibatch."""

from __future__ import annotations

import math

__all__ = [
    "cyclic_cosine_lr",
]


def cyclic_cosine_lr(iteration: int, cycle: int, lr_min: float, lr_max: float) -> float:
    """``lr_min + (lr_max - lr_min) * 0.5 * (1 + cos(pi * (1 + 2 * iteration / cycle)))``.

    ``cycle`` is the number of minibatches in one cycle (four epochs in the paper), so
    the rate starts at ``lr_min``, peaks at ``lr_max`` half way, and is back at
    ``lr_min`` after every whole cycle: minima at epochs 0, 4, 8, ..., maxima at 2, 6, ...
    """
    return lr_min + (lr_max - lr_min) * 0.5 * (
        1.0 + math.cos(math.pi * (1.0 + 2.0 * iteration / cycle))
    )
