"""ASHA compares trials only at the ends of learning-rate cycles: the real Ray scheduler,
fed results the way Tune feeds them."""

from __future__ import annotations

import dataclasses

import pytest
from ray.tune.experiment import Trial
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler

from gridsearch._scheduler import (
    ParetoHalving,
    asha_rungs,
    asha_scheduler,
    cycle_epochs,
    describe_rungs,
    make_scheduler,
    pareto_ranks,
    promoted,
)
from gridsearch._scheduler_choice import resolve_scheduler
from gridsearch.settings import CPU_SIZED, SMOKE
from gridsearch.spaces import get_space
from trainables.config import TrainConfig

METRIC = "dev/r10_mean_best"


@pytest.mark.parametrize(
    ("epochs", "cycle", "rungs"),
    [(32, 4, [4, 8, 16]), (33, 4, [4, 8, 16, 32]), (2, 1, [1]), (8, 1, [1, 2, 4]), (4, 4, []),
     (2, 4, []), (0, 4, [])],
)  # fmt: skip
def test_rungs_are_doubling_cycle_ends_before_the_last_epoch(
    epochs: int, cycle: int, rungs: list[int]
) -> None:
    assert asha_rungs(epochs, cycle) == rungs
    assert (asha_scheduler(epochs, cycle) is None) == (not rungs)


def _decisions(curves: list[list[float]], epochs: int, cycle: int) -> list[list[str]]:
    """The real ASHAScheduler's decision for each trial at each epoch, trials reporting in
    turn every epoch as concurrent trials do; a stopped trial reports no more."""
    scheduler = asha_scheduler(epochs, cycle)
    assert scheduler is not None
    scheduler.set_search_properties(METRIC, "max")
    trials = [Trial("__fake", config={}, stub=True, trial_id=f"t{i}") for i in range(len(curves))]
    for trial in trials:
        scheduler.on_trial_add(None, trial)
    decisions: list[list[str]] = [[] for _ in trials]
    for epoch in range(epochs + 1):
        for i, trial in enumerate(trials):
            if TrialScheduler.STOP in decisions[i]:
                continue
            result = {"epoch": float(epoch), METRIC: curves[i][epoch]}
            decisions[i].append(scheduler.on_trial_result(None, trial, result))
    return decisions


def test_a_slow_starter_is_judged_at_the_cycle_end_not_after_one_epoch() -> None:
    # The shape the search-efficiency bench found: the best model trails after epoch 1.
    slow = [0.0, 9.6, 15.9, 52.1, 62.8, 63.0, 63.1, 63.2, 63.3]
    fast = [0.0, 26.0, 40.0, 50.0, 55.0, 56.0, 56.5, 57.0, 57.0]
    weak = [0.0, 20.0, 30.0, 35.0, 38.0, 39.0, 39.5, 40.0, 40.0]
    decisions = _decisions([fast, weak, slow], epochs=8, cycle=4)
    for trial in decisions:
        assert TrialScheduler.STOP not in trial[:4]  # nobody stopped inside the first cycle
    assert decisions[1][4] == TrialScheduler.STOP  # below the median at epoch 4
    assert len(decisions[2]) == 9 and decisions[2][-1] == TrialScheduler.STOP  # ran to max_t


def test_the_search_reads_the_cycle_from_the_space_then_the_run() -> None:
    space = get_space("margin_sweep")
    assert "cycle_epochs" not in space.fixed
    assert TrainConfig.cycle_epochs == 4
    cycle = cycle_epochs(space.fixed, {"epochs": 32})
    assert isinstance(make_scheduler("asha", 32, cycle), ASHAScheduler)
    assert "at epoch 4, 8, 16" in describe_rungs(32, cycle)
    own = dataclasses.replace(space, fixed={"cycle_epochs": 2})  # the space's cycle wins
    cycle = cycle_epochs(own.fixed, {"epochs": 32, "cycle_epochs": 1})
    assert "the 2-epoch learning-rate cycles: at epoch 2, 4, 8, 16" in describe_rungs(32, cycle)
    for sized in (CPU_SIZED, SMOKE):  # short runs, short cycles: ASHA still stops after 1
        cycle = cycle_epochs(space.fixed, sized)
        assert ": at epoch 1, " in describe_rungs(int(sized["epochs"]), cycle)
    assert "at epoch 1, 2, each time" in describe_rungs(int(CPU_SIZED["epochs"]), 1)
    assert isinstance(make_scheduler("asha", 2, 4), FIFOScheduler)
    assert "no trial is stopped early" in describe_rungs(2, 4)
    assert isinstance(make_scheduler("fifo", 32, 4), FIFOScheduler)


@pytest.mark.parametrize(
    ("points", "ranks"),
    [
        ([(3, 1), (1, 3), (2, 2), (1, 1), (0, 0)], [0, 0, 0, 1, 2]),
        ([(1, 1), (1, 1)], [0, 0]),  # equal points dominate neither
        ([(2, 1), (2, 0), (1, 1)], [0, 1, 1]),  # better on one, equal on the other
        ([(5, float("-inf")), (0, 0)], [0, 0]),
    ],
)
def test_pareto_ranks_on_hand_made_fronts(points: list, ranks: list[int]) -> None:
    assert pareto_ranks(points) == ranks


def test_a_trial_stops_only_when_enough_trials_dominate_it() -> None:
    rung = [(3, 1), (1, 3), (2, 2), (1, 1), (0, 0)]  # keep ceil(5 / 2) = 3: the front
    assert [promoted(i, rung, 2) for i in range(5)] == [True, True, True, False, False]
    straddling = [(5, 5), (3, 1), (1, 3), (0, 0)]  # keep 2: rank 1 straddles, goes on whole
    assert [promoted(i, straddling, 2) for i in range(4)] == [True, True, True, False]
    assert promoted(0, [(0, 0)], 2)  # the first at a rung goes on
    assert not promoted(1, [(1, 1), (0, 0)], 2)


def _pareto_decisions(points: list[list[tuple[float, float]]], epochs: int, cycle: int):
    scheduler = make_scheduler("asha", epochs, cycle, ["r", "s"], ["max", "max"])
    assert isinstance(scheduler, ParetoHalving)
    trials = [Trial("__fake", config={}, stub=True, trial_id=f"t{i}") for i in range(len(points))]
    decisions: list[list[str]] = [[] for _ in trials]
    for epoch in range(epochs + 1):
        for i, trial in enumerate(trials):
            if TrialScheduler.STOP in decisions[i]:
                continue
            r, s = points[i][epoch]
            decisions[i].append(
                scheduler.on_trial_result(None, trial, {"epoch": epoch, "r": r, "s": s})
            )
    return scheduler, decisions


def test_pareto_halving_judges_both_objectives_at_cycle_ends() -> None:
    # A: best retrieval; B: best semantics; C: dominated by A and B at epoch 2; D: NaN
    a = [(0, 0), (10, 0.1), (50, 0.5), (60, 0.6), (62, 0.6)]
    b = [(0, 0), (5, 0.3), (40, 0.7), (45, 0.7), (47, 0.72)]
    c = [(0, 0), (30, 0.6), (35, 0.4), (36, 0.4), (36, 0.4)]
    d = [(0, 0), (20, float("nan")), (20, float("nan")), (20, 0.1), (20, 0.1)]
    scheduler, decisions = _pareto_decisions([a, b, c, d], epochs=4, cycle=2)
    assert scheduler.rungs.keys() == {2}  # the only cycle end before the last epoch
    assert all(TrialScheduler.STOP not in d[:2] for d in decisions)  # epoch 1: no rung
    assert [len(d) for d in decisions] == [5, 5, 3, 3]  # C and D stop at epoch 2
    assert scheduler.stopped == {"t2": 2, "t3": 2}
    assert "stopped" in scheduler.debug_string()


@pytest.mark.parametrize(
    ("kind", "objective", "epochs", "expected"),
    [
        ("auto", "retrieval", 4, "fifo"),  # the CPU-sized default run: too short to stop early
        ("auto", "semantic", 7, "fifo"),
        ("auto", "retrieval", 8, "asha"),
        ("auto", "semantic", 32, "asha"),
        ("auto", "both", 2, "asha"),  # Pareto halving helped even at 4 epochs
        ("auto", "both", 32, "asha"),
        ("asha", "retrieval", 4, "asha"),  # asked for: kept
        ("fifo", "both", 32, "fifo"),
    ],
)
def test_auto_resolves_to_what_was_measured_best(
    kind: str, objective: str, epochs: int, expected: str
) -> None:
    assert resolve_scheduler(kind, objective, epochs) == expected


def test_unknown_scheduler_is_refused() -> None:
    with pytest.raises(ValueError, match="expected one of auto, asha, fifo"):
        resolve_scheduler("hyperband", "retrieval", 8)
