"""Paired significance tests for two models evaluated on the same items.

- Retrieval: a paired bootstrap over *images* (an image and its five captions are
  resampled together, as the paper's intervals count images), giving each metric's
  difference with a 95% percentile interval and a two-sided p; and McNemar's exact test
  on the R@K hits of the individual queries.
- Correlations with the same gold scores: Steiger's (1980) z and Williams' t for two
  dependent correlations r(A, gold) and r(B, gold), using r(A, B), the correlation
  between the two models' similarity scores.

Every signed statistic follows B - A: positive when B's value is the larger (for the
correlations and recalls: B better; for ranks, where lower is better: B worse).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import stats

from trainables.stats import RECALL_KS, median_rank, recall_at

# Two correlations this close are equal but for float64 round-off: Pearson's r of a score
# and of the same score up to scale (2x + 1) can differ in the last bits, and r(A, B) of
# such a pair reads 0.9999999999999998, not 1.0; Steiger's z then divided 0 by round-off
# (NaN where no difference is meant). 1e-12 is far above that round-off (a few 1e-16 per
# step) and far below any difference the tests could call significant.
SAME_R = 1e-12
CAPTIONS_PER_IMAGE = 5  # the store's (storage.CAPTIONS_PER_IMAGE; not imported: pyarrow)
_CHUNK = 250  # bootstrap resamples drawn at a time


class Difference(NamedTuple):
    metric: str
    a: float
    b: float
    diff: float  # b - a
    ci_low: float  # 95% percentile interval of the bootstrap differences
    ci_high: float
    p_bootstrap: float  # two-sided
    p_mcnemar: float  # exact McNemar on the queries' hits (R@K only; NaN otherwise)


def steiger_z(r_a: float, r_b: float, r_ab: float, n: int) -> tuple[float, float]:
    """Steiger's (1980, eq. 14) z for H0: rho(A, gold) == rho(B, gold), with the Fisher z
    of each and the pooled r: ``z = (z_b - z_a) sqrt((n - 3) / (2 - 2c))`` (signed as
    ``r_b - r_a``: positive when B correlates better with the gold scores), where
    ``c = psi / (1 - rbar^2)^2`` and ``psi = r_ab (1 - 2 rbar^2) - rbar^2 (1 - 2 rbar^2
    - r_ab^2) / 2``. Returns ``(z, two-sided p)``; for degenerate input see
    :func:`_degenerate` (never an exception for a correlation in [-1, 1])."""
    degenerate = _degenerate(r_a, r_b, r_ab, n)
    if degenerate is not None:
        return degenerate
    rbar2 = ((r_a + r_b) / 2) ** 2
    psi = r_ab * (1 - 2 * rbar2) - 0.5 * rbar2 * (1 - 2 * rbar2 - r_ab**2)
    c = psi / (1 - rbar2) ** 2
    if 2 - 2 * c <= 0:  # r_ab at 1 up to rounding: no variance left to test against
        return math.nan, math.nan
    z = (math.atanh(r_b) - math.atanh(r_a)) * math.sqrt((n - 3) / (2 - 2 * c))
    return z, float(2 * stats.norm.sf(abs(z)))


def williams_t(r_a: float, r_b: float, r_ab: float, n: int) -> tuple[float, float]:
    """Williams' t (Steiger 1980, eq. 7; df = n - 3) for the same hypothesis, signed as
    ``r_b - r_a``:
    ``t = (r_b - r_a) sqrt((n-1)(1+r_ab)) / sqrt(2 (n-1)/(n-3) |R| + rbar^2 (1-r_ab)^3)``
    with ``|R| = 1 - r_a^2 - r_b^2 - r_ab^2 + 2 r_a r_b r_ab``. Returns ``(t, p)``; for
    degenerate input see :func:`_degenerate`."""
    degenerate = _degenerate(r_a, r_b, r_ab, n)
    if degenerate is not None:
        return degenerate
    det = 1 - r_a**2 - r_b**2 - r_ab**2 + 2 * r_a * r_b * r_ab
    rbar = (r_a + r_b) / 2
    denominator = 2 * (n - 1) / (n - 3) * det + rbar**2 * (1 - r_ab) ** 3
    if denominator <= 0:  # |R| = 0 (one score a linear function of the others) at r_ab = 1
        return math.nan, math.nan
    t = (r_b - r_a) * math.sqrt((n - 1) * (1 + r_ab) / denominator)
    return t, float(2 * stats.t.sf(abs(t), n - 3))


def _degenerate(r_a: float, r_b: float, r_ab: float, n: int) -> tuple[float, float] | None:
    """The answer for input where the tests' formulas break down, else None:

    - NaN, NaN: a correlation is NaN (a constant score), n <= 3 (no degrees of freedom),
      or one of r_a, r_b is exactly +-1 and the other is not (the Fisher z is infinite);
    - 0, 1 (no difference): r_a == r_b, or r_ab == 1 (A's scores are B's up to scale,
      e.g. a trial compared with itself; then r_a == r_b but for rounding). Both equalities
      hold within ``SAME_R`` (float64 round-off of the correlations).

    A correlation outside [-1, 1] is a ``ValueError``."""
    values = {"r_a": r_a, "r_b": r_b, "r_ab": r_ab}
    for name, r in values.items():
        if not math.isnan(r) and not -1.0 <= r <= 1.0:
            raise ValueError(f"{name} must be a correlation in [-1, 1], got {r}")
    if n <= 3 or any(math.isnan(r) for r in values.values()):
        return math.nan, math.nan
    if abs(r_b - r_a) <= SAME_R or r_ab >= 1.0 - SAME_R:
        return 0.0, 1.0
    if max(abs(r_a), abs(r_b)) == 1.0:
        return math.nan, math.nan
    return None


def mcnemar_exact(hits_a: np.ndarray, hits_b: np.ndarray) -> float:
    """Two-sided exact McNemar p: a binomial test on the discordant queries (1.0 when
    the two models hit and miss the same queries)."""
    only_a = int(np.sum(hits_a & ~hits_b))
    only_b = int(np.sum(~hits_a & hits_b))
    if only_a + only_b == 0:
        return 1.0
    return float(stats.binomtest(only_a, only_a + only_b, 0.5).pvalue)


def _metrics(c2i: np.ndarray, i2c: np.ndarray) -> dict[str, np.ndarray]:
    """Retrieval metrics along the last axes: ``c2i (..., N, 5)``, ``i2c (..., N)``."""
    captions = c2i.reshape(*c2i.shape[:-2], -1)
    out = {}
    for direction, ranks in (("c2i", captions), ("i2c", i2c)):
        for k in RECALL_KS:
            out[f"{direction}_r{k}"] = recall_at(ranks, k)
        out[f"{direction}_medr"] = median_rank(ranks)
        out[f"{direction}_meanr"] = np.mean(ranks, axis=-1)
    out["r10_mean"] = (out["c2i_r10"] + out["i2c_r10"]) / 2
    return out


def paired_bootstrap(
    ranks_a: tuple[np.ndarray, np.ndarray],
    ranks_b: tuple[np.ndarray, np.ndarray],
    *,
    resamples: int = 10_000,
    seed: int = 0,
) -> list[Difference]:
    """Compare two models' per-query ranks ``(c2i (5N,), i2c (N,))`` on the same split
    (``trainables.metrics.retrieval_ranks``): every retrieval metric of each, B - A, the
    95% percentile interval of B - A over ``resamples`` resamples of the images (each
    with its captions), and the two-sided bootstrap p ``2 min(P(d <= 0), P(d >= 0))``
    (with the +1 correction, capped at 1; identical models give p = 1)."""
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    c2i_a, i2c_a = (np.asarray(r) for r in ranks_a)
    c2i_b, i2c_b = (np.asarray(r) for r in ranks_b)
    n = len(i2c_a)
    if n == 0:
        raise ValueError("ranks of no image: there is nothing to resample")
    if len(i2c_b) != n or c2i_a.shape != (n * CAPTIONS_PER_IMAGE,) or c2i_b.shape != c2i_a.shape:
        raise ValueError(
            f"ranks must be (c2i ({CAPTIONS_PER_IMAGE}N,), i2c (N,)) of the same split, got "
            f"{c2i_a.shape}, {i2c_a.shape} and {c2i_b.shape}, {i2c_b.shape}"
        )
    grid_a, grid_b = c2i_a.reshape(n, -1), c2i_b.reshape(n, -1)
    observed_a, observed_b = _metrics(grid_a, i2c_a), _metrics(grid_b, i2c_b)
    draws = _bootstrap_differences(
        (grid_a, i2c_a), (grid_b, i2c_b), list(observed_a), resamples, seed
    )
    results = []
    for name, d in draws.items():
        a_value, b_value = float(observed_a[name]), float(observed_b[name])
        results.append(
            Difference(
                name,
                a_value,
                b_value,
                b_value - a_value,
                float(np.percentile(d, 2.5)),
                float(np.percentile(d, 97.5)),
                _bootstrap_p(d, resamples),
                _mcnemar_p(name, (c2i_a, i2c_a), (c2i_b, i2c_b)),
            )
        )
    return results


def _bootstrap_p(d: np.ndarray, resamples: int) -> float:
    """Two-sided ``2 min(P(d <= 0), P(d >= 0))`` with the +1 correction, capped at 1."""
    below, above = (
        (np.sum(d <= 0) + 1) / (resamples + 1),
        (np.sum(d >= 0) + 1) / (resamples + 1),
    )
    return float(min(1.0, 2 * min(below, above)))


def _mcnemar_p(
    name: str, ranks_a: tuple[np.ndarray, np.ndarray], ranks_b: tuple[np.ndarray, np.ndarray]
) -> float:
    """McNemar's exact p on the hits of metric ``name`` if it is an R@K of one direction
    (``c2i_r5``, ``i2c_r1``, ...), else NaN; ``ranks_*`` are ``(c2i (5N,), i2c (N,))``."""
    if "_r" not in name or name == "r10_mean":
        return math.nan
    k = int(name.rsplit("_r", 1)[1])
    a, b = (ranks_a[0], ranks_b[0]) if name.startswith("c2i") else (ranks_a[1], ranks_b[1])
    return mcnemar_exact(a <= k, b <= k)


def _bootstrap_differences(
    ranks_a: tuple[np.ndarray, np.ndarray],
    ranks_b: tuple[np.ndarray, np.ndarray],
    names: list[str],
    resamples: int,
    seed: int,
) -> dict[str, np.ndarray]:
    """B - A of each metric in ``names`` on ``resamples`` resamples of the images, drawn
    ``_CHUNK`` at a time; ``ranks_*`` are ``(c2i (N, 5), i2c (N,))``, an image per row."""
    (grid_a, i2c_a), (grid_b, i2c_b) = ranks_a, ranks_b
    n = len(i2c_a)
    rng = np.random.default_rng(seed)
    draws: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for start in range(0, resamples, _CHUNK):
        rows = rng.integers(0, n, size=(min(_CHUNK, resamples - start), n))
        boot_a, boot_b = _metrics(grid_a[rows], i2c_a[rows]), _metrics(grid_b[rows], i2c_b[rows])
        for name in draws:
            draws[name].append(boot_b[name] - boot_a[name])
    return {name: np.concatenate(parts) for name, parts in draws.items()}
