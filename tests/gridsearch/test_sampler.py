"""Space-filling starts: the first trials of every named space without a grid cover its
range evenly (no two values of a parameter closer than a tenth of its range), then TPE."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from gridsearch._optuna import make_sampler
from gridsearch._sampler import STARTUP_TRIALS, SpaceFillingSampler, stratum_values
from gridsearch.spaces import SPACES, get_space, sample_config

optuna.logging.set_verbosity(optuna.logging.WARNING)
NO_GRID = [name for name, space in SPACES.items() if space.grid is None]


def _ask(space_name: str, sampler: optuna.samplers.BaseSampler, n: int, study=None) -> list:
    """``n`` trials of the space, each told a score, as Tune's searcher runs them; the
    frozen trials (their Optuna parameters and distributions)."""
    study = study or optuna.create_study(sampler=sampler, direction="maximize")  # as ours
    for _ in range(n):
        trial = study.ask()
        config = sample_config(get_space(space_name), trial)
        study.tell(trial, sum(float(v) for v in config.values() if isinstance(v, int | float)))
    return study.trials


def _axis(distribution: BaseDistribution, value: float) -> float:
    """Where ``value`` lies on the parameter's axis, as a fraction of its range."""
    assert isinstance(distribution, FloatDistribution | IntDistribution)
    low, high = float(distribution.low), float(distribution.high)
    if distribution.log:
        return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low))
    return (value - low) / (high - low)


def _spread_ok(trials: list) -> None:
    values: dict[str, list[Any]] = {}
    kinds: dict[str, BaseDistribution] = {}
    for trial in trials:
        for name, value in trial.params.items():
            values.setdefault(name, []).append(value)
            kinds[name] = trial.distributions[name]
    for name, drawn in values.items():
        distribution = kinds[name]
        if isinstance(distribution, CategoricalDistribution):
            counts = [drawn.count(c) for c in distribution.choices]
            # balanced over the trials that drew it (a conditional branch may see fewer)
            assert max(counts) - min(counts) <= max(1, len(trials) - len(drawn)), (name, counts)
            continue
        positions = sorted(_axis(distribution, v) for v in drawn)
        gaps = [b - a for a, b in itertools.pairwise(positions)]
        assert not gaps or min(gaps) >= 0.1 - 1e-6, (name, drawn)
        assert positions[0] >= 0 and positions[-1] <= 1


def test_strata_are_the_midpoints_of_equal_parts_of_the_range() -> None:
    assert stratum_values(FloatDistribution(0.05, 0.5), 4) == [0.10625, 0.21875, 0.33125, 0.44375]
    log = stratum_values(FloatDistribution(1e-5, 1e-2, log=True), 3)
    assert log == pytest.approx([10**-4.5, 10**-3.5, 10**-2.5])
    assert stratum_values(IntDistribution(1, 4), 4) == [1, 2, 3, 4]
    assert stratum_values(IntDistribution(0, 100, step=10), 2) == [20, 80]
    assert stratum_values(FloatDistribution(0.0, 1.0, step=0.25), 2) == [0.25, 0.75]
    assert stratum_values(CategoricalDistribution(("gru", "lstm")), 5) == [
        "gru", "lstm", "gru", "lstm", "gru",
    ]  # fmt: skip


def test_the_default_margin_sweep_spans_its_range() -> None:
    """The README's first command: 4 trials on a CPU (TPE drew 0.372, 0.297, 0.321 and
    0.295 in one run, none in the paper's stable band)."""
    sampler, name = make_sampler(get_space("margin_sweep"), 0, False, num_samples=4)
    margins = sorted(t.params["margin"] for t in _ask("margin_sweep", sampler, 4))
    assert margins == [0.10625, 0.21875, 0.33125, 0.44375]
    assert any(0.15 <= m <= 0.25 for m in margins)
    assert name == "4 space-filling starts, then Optuna TPE"


@pytest.mark.parametrize("name", NO_GRID)
@pytest.mark.parametrize("budget", [2, 3, 4, 7, 10])
def test_every_space_without_a_grid_is_covered_evenly(name: str, budget: int) -> None:
    for seed in (0, 1, 2):
        sampler, _ = make_sampler(get_space(name), seed, False, num_samples=budget)
        _spread_ok(_ask(name, sampler, budget))


def test_a_larger_budget_fills_ten_starts_then_tpe_models_the_results() -> None:
    _, name = make_sampler(get_space("margin_sweep"), 0, True, num_samples=30)
    assert name == f"{STARTUP_TRIALS} space-filling starts, then Optuna TPE (multi-objective)"
    sampler, _ = make_sampler(get_space("margin_sweep"), 0, False, num_samples=30)
    trials = _ask("margin_sweep", sampler, 30)
    starts = [t.params["margin"] for t in trials[:STARTUP_TRIALS]]
    assert sorted(starts) == stratum_values(FloatDistribution(0.05, 0.5), STARTUP_TRIALS)
    later = [t.params["margin"] for t in trials[STARTUP_TRIALS:]]
    assert not set(later) & set(starts)  # no longer the design's midpoints
    # the stand-in score grows with the margin: TPE concentrates its draws high
    assert sum(m > 0.3 for m in later) > len(later) / 2


def test_the_design_is_the_seeds_and_survives_a_restart(tmp_path: Path) -> None:
    def margins(seed: int) -> list[float]:
        sampler = SpaceFillingSampler(6, seed)
        return [t.params["margin"] for t in _ask("margin_sweep", sampler, 6)]

    assert margins(3) == margins(3) and margins(3) != margins(4)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    first = optuna.create_study(
        storage=storage, study_name="s", sampler=SpaceFillingSampler(6, 3), direction="maximize"
    )
    _ask("margin_sweep", first.sampler, 2, study=first)
    again = optuna.load_study(storage=storage, study_name="s", sampler=SpaceFillingSampler(6, 3))
    resumed = _ask("margin_sweep", again.sampler, 4, study=again)
    assert [t.params["margin"] for t in resumed] == margins(3)


def test_a_grid_space_keeps_the_grid_sampler() -> None:
    sampler, name = make_sampler(get_space("paper_grid"), 0, False, num_samples=8)
    assert isinstance(sampler, optuna.samplers.GridSampler) and name == "Optuna grid"
    with pytest.raises(ValueError, match="startup: got 0"):
        SpaceFillingSampler(0, 0)


def test_two_objectives_start_space_filling_then_use_multi_objective_tpe() -> None:
    sampler, _ = make_sampler(get_space("margin_sweep"), 0, True, num_samples=12)
    study = optuna.create_study(sampler=sampler, directions=["maximize", "maximize"])
    for _ in range(12):
        trial = study.ask()
        margin = sample_config(get_space("margin_sweep"), trial)["margin"]
        study.tell(trial, [margin, -abs(margin - 0.2)])  # a front: high margin vs near 0.2
    starts = sorted(t.params["margin"] for t in study.trials[:STARTUP_TRIALS])
    assert starts == stratum_values(FloatDistribution(0.05, 0.5), STARTUP_TRIALS)
    assert all(0.05 <= t.params["margin"] <= 0.5 for t in study.trials[STARTUP_TRIALS:])


def test_the_gp_sampler_takes_over_after_the_same_starts_and_models_the_results() -> None:
    sampler, name = make_sampler(get_space("margin_sweep"), 0, False, num_samples=16, model="gp")
    assert name == f"{STARTUP_TRIALS} space-filling starts, then Optuna GP"
    tpe, _ = make_sampler(get_space("margin_sweep"), 0, False, num_samples=16)
    trials = _ask("margin_sweep", sampler, 14)
    starts = [t.params["margin"] for t in trials[:STARTUP_TRIALS]]
    assert starts == [t.params["margin"] for t in _ask("margin_sweep", tpe, STARTUP_TRIALS)]
    later = [t.params["margin"] for t in trials[STARTUP_TRIALS:]]
    assert not set(later) & set(starts)
    assert sum(m > 0.3 for m in later) > len(later) / 2  # the stand-in score grows with it
    again, _ = make_sampler(get_space("margin_sweep"), 0, False, num_samples=16, model="gp")
    assert [t.params["margin"] for t in _ask("margin_sweep", again, 14)] == starts + later
    with pytest.raises(ValueError, match="model: got 'smac'"):
        SpaceFillingSampler(4, 0, "smac")
