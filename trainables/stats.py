"""Statistics on plain numbers (numpy only, no torch): R@K and median rank of
given ranks, the 95% intervals of the paper's tables, and the correlations of the
semantic evaluation. ``trainables.metrics`` re-exports them beside the retrieval
metrics; ``analysis`` imports them from here, so reading a search needs no torch.

    >>> lo, hi = pearson_ci(0.722, 1379)  # STS-B in the paper's Table 5: +2.4 / -2.6
    >>> round(100 * (hi - 0.722), 1), round(100 * (0.722 - lo), 1)
    (2.4, 2.6)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "CONSTANT_RTOL",
    "RECALL_KS",
    "Z95",
    "average_ranks",
    "correlations",
    "is_constant",
    "median_rank",
    "pearson",
    "pearson_ci",
    "recall_at",
    "recall_ci",
    "spearman",
]

_log = logging.getLogger(__name__)

Z95 = 1.96  # two-sided 95% normal quantile, as the paper uses
RECALL_KS = (1, 5, 10)

# "Constant" within round-off: a model's outputs for identical inputs need not be equal.
# A float32 matrix product's result depends on how the kernel blocks the rows, so on
# torch 2.14.1's CPU kernels the relatedness classifier's predictions for 50 identical test
# pairs spread over one float32 ulp (about 2e-7 around 2.8), and an exact ``ptp == 0``
# read that spread as a correlation (Pearson -0.18 where 0 is meant). 1e-5 is about 84
# float32 epsilons (2**-23 = 1.2e-7): room for a sum's accumulated round-off, and far below
# any spread a real encoder's scores have. It is relative to the values' magnitude, so a
# vector that really varies is never constant at any scale (values of order 1e-6 that
# differ by 1e-7 vary; 3.0 +- 2e-7 does not). Float64 data is held to the same bound:
# float32 predictions reach this module cast to float64, their dtype no longer visible.
CONSTANT_RTOL = 1e-5


def recall_at(ranks: np.ndarray, k: int) -> np.ndarray:
    """R@K in percent along the last axis of 1-based ``ranks``: ``hits * 100 / queries``
    (so 357 of 1,000 read 35.7, not 35.699999999999996). A 0-d array for 1-D ranks."""
    ranks = np.asarray(ranks)
    return np.count_nonzero(ranks <= k, axis=-1) * 100 / ranks.shape[-1]


def median_rank(ranks: np.ndarray) -> np.ndarray:
    """The median of 1-based ``ranks`` along the last axis as the paper's code and VSE++
    report it: an integer, the lower of the two middle ranks for an even count
    (``[1, 2, 7, 9] -> 2``), never x.5. A 0-d array for 1-D ranks."""
    ranks = np.asarray(ranks)
    if ranks.shape[-1] == 0:
        raise ValueError("median_rank needs at least one rank")
    return np.sort(ranks, axis=-1)[..., (ranks.shape[-1] - 1) // 2]


def recall_ci(recall: float, n: int) -> tuple[float, float]:
    """95% interval of a recall in percent: the normal approximation to the proportion,
    ``p +- 1.96 sqrt(p (1 - p) / n)``, clipped to [0, 100].

    ``n`` is the number of *images*, in both directions, as in the paper's Tables 2-3
    (its +-intervals are reproduced exactly this way): the five captions of an image are
    not independent queries, so counting images is the conservative choice for c2i.
    The interval has zero width at 0% and 100%.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    p = recall / 100.0
    half = Z95 * math.sqrt(max(p * (1.0 - p), 0.0) / n)
    return max(0.0, 100.0 * (p - half)), min(100.0, 100.0 * (p + half))


def pearson_ci(r: float, n: int) -> tuple[float, float]:
    """95% interval of a Pearson r from ``n`` pairs by the Fisher z transform:
    ``tanh(atanh(r) +- 1.96 / sqrt(n - 3))`` (reproduces the paper's Table 5).

    ``r`` of exactly +-1 gives the degenerate interval ``(r, r)``; NaN gives NaNs.
    """
    if n <= 3:
        raise ValueError(f"n must be > 3 for a Fisher-z interval, got {n}")
    if math.isnan(r):
        return math.nan, math.nan
    if not -1.0 <= r <= 1.0:
        raise ValueError(f"r must lie in [-1, 1], got {r}")
    if abs(r) == 1.0:
        return r, r
    z, half = math.atanh(r), Z95 / math.sqrt(n - 3)
    return math.tanh(z - half), math.tanh(z + half)


def _vector(values: Any, argument: str) -> np.ndarray:
    """A 1-D float64 array of a sequence, numpy array or (CPU or GPU) torch tensor."""
    if hasattr(values, "detach"):  # a torch tensor, without importing torch here
        values = values.detach().cpu().numpy()
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{argument} must be 1-D, got shape {array.shape}")
    return array


def _checked_pair(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    a, b = _vector(x, "x"), _vector(y, "y")
    if a.shape != b.shape or a.size < 2:
        raise ValueError(f"x and y must have one equal length >= 2, got {a.shape} and {b.shape}")
    return a, b


def _either_constant(a: np.ndarray, b: np.ndarray) -> bool:
    return is_constant(a) or is_constant(b)


def is_constant(
    values: Sequence[float] | np.ndarray | Any, *, rtol: float = CONSTANT_RTOL, atol: float = 0.0
) -> bool:
    """Whether the 1-D ``values`` are constant within round-off: their spread
    ``max - min <= rtol * max(|values|) + atol`` (see ``CONSTANT_RTOL`` for the bound).
    Exactly equal values are constant at any tolerance; NaN makes them not constant.

    >>> is_constant([3.0, 3.0 + 2e-7, 3.0]), is_constant([1e-6, 2e-6, 1.5e-6])
    (True, False)
    """
    a = _vector(values, "values")
    return a.size == 0 or bool(np.ptp(a) <= rtol * np.max(np.abs(a)) + atol)


def pearson(x: Sequence[float] | np.ndarray | Any, y: Sequence[float] | np.ndarray | Any) -> float:
    """Pearson's r in float64; NaN when either input is constant (r is undefined),
    constant within round-off included (``is_constant``): centring a round-off spread
    would give a correlation of noise."""
    a, b = _checked_pair(x, y)
    if _either_constant(a, b):
        return math.nan
    a, b = a - a.mean(), b - b.mean()
    denominator = math.sqrt(float(a @ a) * float(b @ b))
    if denominator == 0.0:  # the squares of a tiny (below 1e-154) spread underflow
        return math.nan
    return max(-1.0, min(1.0, float(a @ b) / denominator))


def spearman(x: Sequence[float] | np.ndarray | Any, y: Sequence[float] | np.ndarray | Any) -> float:
    """Spearman's rho: Pearson's r of the ranks, ties given their average rank; NaN when
    either input is constant within round-off (its ranks would order the round-off)."""
    a, b = _checked_pair(x, y)
    if _either_constant(a, b):
        return math.nan
    return pearson(average_ranks(a), average_ranks(b))


def average_ranks(x: np.ndarray) -> np.ndarray:
    """The ranks of ``x`` from 1, ties given their average rank (``scipy.stats.rankdata``'s
    default, to which the tests hold it). Not scipy's own: importing ``scipy.stats`` costs
    every trial process about half a second of CPU for this one function."""
    order = np.argsort(x, kind="stable")
    ordered = x[order]
    first = np.r_[True, ordered[1:] != ordered[:-1]]  # where each run of ties starts
    starts = np.flatnonzero(first)
    sizes = np.diff(np.r_[starts, len(x)])
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.repeat(starts + (sizes + 1) / 2, sizes)
    return ranks


def correlations(
    predicted: np.ndarray, gold: np.ndarray, what: str = "correlation"
) -> tuple[float, float]:
    """(Pearson, Spearman) of ``predicted`` against ``gold``; (0.0, 0.0) and a logged
    warning naming ``what`` when either side is constant (an untrained or collapsed
    encoder can embed every sentence alike), where both are undefined. Constant means
    constant within round-off (``is_constant``): identical inputs can come out of a
    float32 model a few ulps apart."""
    a, b = _vector(predicted, "predicted"), _vector(gold, "gold")
    if a.size < 2 or _either_constant(a, b):
        _log.warning("%s: constant predictions or gold scores; correlations set to 0.0", what)
        return 0.0, 0.0
    return pearson(a, b), spearman(a, b)
