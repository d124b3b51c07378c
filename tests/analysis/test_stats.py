"""The paired tests of analysis.compare on numbers worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis import _stats
from trainables.metrics import summarise_ranks
from trainables.stats import pearson


def test_steiger_z_against_a_hand_computed_value() -> None:
    # r(A, gold) = .5, r(B, gold) = .3, r(A, B) = .4, n = 100:
    # rbar^2 = .16; psi = .4 (1 - .32) - .08 (1 - .32 - .16) = .272 - .0416 = .2304;
    # c = .2304 / .84^2 = 16/49; z = (atanh .3 - atanh .5) sqrt(97 / (2 - 32/49))
    #   = -0.2397859 * sqrt(97 * 49 / 66) = -2.03487; p = 2 (1 - Phi(2.03487)) = 0.04186.
    # Signed as B - A: A (.5) correlates better, so z < 0.
    z, p = _stats.steiger_z(0.5, 0.3, 0.4, 100)
    assert z == pytest.approx(-2.03487, abs=1e-5)
    assert p == pytest.approx(0.04186, abs=1e-5)
    z_swapped, p_swapped = _stats.steiger_z(0.3, 0.5, 0.4, 100)
    assert (z_swapped, p_swapped) == pytest.approx((-z, p))


def test_williams_t_against_a_hand_computed_value() -> None:
    # |R| = 1 - .25 - .09 - .16 + 2 (.5)(.3)(.4) = .62;
    # t = -.2 sqrt(99 * 1.4) / sqrt(2 (99/97) .62 + .16 * .6^3) = -2.35457 / 1.14023
    #   = -2.06499 (B - A: A correlates better)
    t, p = _stats.williams_t(0.5, 0.3, 0.4, 100)
    assert t == pytest.approx(-2.06499, abs=1e-5)
    assert p == pytest.approx(0.04159, abs=1e-5)


@pytest.mark.parametrize("test", [_stats.steiger_z, _stats.williams_t])
def test_every_statistic_has_the_sign_of_b_minus_a(test) -> None:
    """A positive statistic means B correlates better with the gold scores, as B - A."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        r_a, r_b = rng.uniform(-0.95, 0.95, size=2)
        r_ab = rng.uniform(0.0, 0.95)
        stat, _ = test(r_a, r_b, r_ab, 500)
        assert math.isnan(stat) or np.sign(stat) == np.sign(r_b - r_a), (r_a, r_b, r_ab, stat)


def test_equal_correlations_are_no_difference() -> None:
    assert _stats.steiger_z(0.6, 0.6, 1.0, 50) == (0.0, 1.0)
    assert _stats.williams_t(0.6, 0.6, 0.9, 50)[1] == pytest.approx(1.0)
    assert all(math.isnan(v) for v in _stats.steiger_z(math.nan, 0.5, 0.4, 50))


ULP_BELOW = math.nextafter(0.6, 0.0)
NAN = (math.nan, math.nan)


@pytest.mark.parametrize("test", [_stats.steiger_z, _stats.williams_t])
@pytest.mark.parametrize(
    ("r_a", "r_b", "r_ab", "n", "expected"),
    [
        (0.6, 0.6, 1.0, 50, (0.0, 1.0)),  # a trial with itself (Williams: 0/0 before)
        (0.6, ULP_BELOW, 1.0, 50, (0.0, 1.0)),  # the same scores, rounded apart (Steiger: /0)
        (-0.4, -0.4, 1.0, 50, (0.0, 1.0)),
        (0.6, 0.6, 0.5, 50, (0.0, 1.0)),
        (1.0, 0.5, 0.5, 50, NAN),  # a perfect correlation on one side: atanh(1) is infinite
        (0.5, -1.0, -0.5, 50, NAN),
        (1.0, 1.0, 1.0, 50, (0.0, 1.0)),
        (0.5, 0.3, 0.4, 3, NAN),  # no degrees of freedom (a ValueError before)
        (0.5, 0.3, 0.4, 0, NAN),
        (math.nan, 0.3, 0.4, 50, NAN),  # a constant score: r is undefined
        (0.5, 0.3, math.nan, 50, NAN),
    ],
)
def test_degenerate_correlations_give_no_difference_or_nan(
    test, r_a: float, r_b: float, r_ab: float, n: int, expected: tuple[float, float]
) -> None:
    got = test(r_a, r_b, r_ab, n)
    assert got == expected or (all(map(math.isnan, got)) and expected == NAN), got


@pytest.mark.parametrize("test", [_stats.steiger_z, _stats.williams_t])
def test_a_model_and_its_rescaled_copy_are_no_difference_despite_round_off(test) -> None:
    """B's scores are A's up to scale (2x + 1): r(A, B) is 1 and r(A, gold) = r(B, gold)
    but for float64 round-off (0.9999999999999998, last-bit differences), which made
    Steiger's z NaN; within ``SAME_R`` they are equal, no difference."""
    rng = np.random.default_rng(0)
    rounded_apart = 0
    for _ in range(200):
        a, gold = rng.normal(size=50), rng.normal(size=50)
        b = 2 * a + 1
        r_a, r_b, r_ab = pearson(a, gold), pearson(b, gold), pearson(a, b)
        rounded_apart += r_ab != 1.0 or r_a != r_b
        assert test(r_a, r_b, r_ab, 50) == (0.0, 1.0), (r_a, r_b, r_ab)
    assert rounded_apart > 10  # the case is exercised, not only exact equalities
    # a real difference, however small against 1, is still tested
    assert test(0.5, 0.5 + 1e-9, 0.9, 50)[1] < 1.0


@pytest.mark.parametrize("test", [_stats.steiger_z, _stats.williams_t])
def test_every_correlation_in_range_gives_numbers_or_nan(test) -> None:
    grid = [-1.0, -0.999999, -0.5, 0.0, 0.3, 0.999999, 1.0, math.nan]
    for r_a in grid:
        for r_b in grid:
            for r_ab in grid:
                for n in (0, 4, 100):
                    stat, p = test(r_a, r_b, r_ab, n)
                    assert math.isnan(stat) == math.isnan(p)
                    assert math.isnan(p) or 0.0 <= p <= 1.0, (r_a, r_b, r_ab, n)


@pytest.mark.parametrize("test", [_stats.steiger_z, _stats.williams_t])
def test_a_correlation_out_of_range_is_refused(test) -> None:
    with pytest.raises(ValueError, match=r"r_ab must be a correlation in \[-1, 1\], got 1.5"):
        test(0.5, 0.3, 1.5, 50)


def _ranks(seed: int, images: int = 200) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(1, 40, size=5 * images), rng.integers(1, 40, size=images)


def test_bootstrap_of_identical_runs_finds_no_difference() -> None:
    ranks = _ranks(0)
    rows = _stats.paired_bootstrap(ranks, ranks, resamples=2000, seed=1)
    assert [r.metric for r in rows][-1] == "r10_mean"
    expected = summarise_ranks(*ranks)
    for row in rows:
        assert row.a == row.b == pytest.approx(expected[row.metric])
        assert row.diff == row.ci_low == row.ci_high == 0.0
        assert row.p_bootstrap == 1.0
        assert row.p_mcnemar == 1.0 or math.isnan(row.p_mcnemar)


def test_bootstrap_finds_a_clear_difference_and_is_seeded() -> None:
    worse = _ranks(0)
    better = (np.maximum(worse[0] - 8, 1), np.maximum(worse[1] - 8, 1))
    rows = {r.metric: r for r in _stats.paired_bootstrap(worse, better, resamples=2000, seed=1)}
    r10 = rows["c2i_r10"]
    assert r10.diff > 0 and 0 < r10.ci_low < r10.diff < r10.ci_high
    assert r10.p_bootstrap == pytest.approx(2 / 2001)  # no resample reverses it
    assert r10.p_mcnemar < 1e-6
    assert rows["c2i_medr"].diff < 0 and math.isnan(rows["r10_mean"].p_mcnemar)
    again = _stats.paired_bootstrap(worse, better, resamples=2000, seed=1)
    assert [r.ci_low for r in again] == [r.ci_low for r in rows.values()]


def test_bootstrap_resamples_images_with_their_captions() -> None:
    # every image's captions all hit (rank 1) or all miss (rank 50) for A; B is A with
    # the images shifted - so any c2i difference comes in whole images
    c2i_a = np.repeat(np.where(np.arange(100) % 2 == 0, 1, 50), 5)
    i2c = np.ones(100, dtype=int)
    c2i_b = np.roll(c2i_a, 5)
    rows = {r.metric: r for r in _stats.paired_bootstrap((c2i_a, i2c), (c2i_b, i2c), resamples=500)}
    assert rows["c2i_r1"].a == rows["c2i_r1"].b == 50.0
    assert rows["c2i_r1"].ci_low < 0 < rows["c2i_r1"].ci_high


def test_mcnemar_exact() -> None:
    a = np.array([True] * 10 + [False] * 10)
    b = np.array([False] * 10 + [False] * 10)
    assert _stats.mcnemar_exact(a, b) == pytest.approx(2 * 0.5**10)  # 10 discordant, all one way


def test_bootstrap_rejects_mismatched_ranks() -> None:
    with pytest.raises(ValueError, match="ranks must be"):
        _stats.paired_bootstrap(_ranks(0, 10), _ranks(0, 11))
    with pytest.raises(ValueError, match="resamples must be >= 1, got 0"):
        _stats.paired_bootstrap(_ranks(0), _ranks(0), resamples=0)
    nothing = (np.array([], dtype=int), np.array([], dtype=int))
    with pytest.raises(ValueError, match="ranks of no image"):
        _stats.paired_bootstrap(nothing, nothing)
