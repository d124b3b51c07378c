"""When a search stops trials early: ASHA at the ends of learning-rate cycles (on two
objectives, its Pareto-rank form), or FIFO.

The cyclic cosine schedule is at its minimum at the end of every cycle, where snapshots
are taken; inside a cycle the learning rate is still rising and the ranking of trials
says little (a bench trial that ended the best stood at 15.9 against 26 for others after
its first epoch). So ASHA compares trials at cycle ends, doubling (``cycle_epochs *
2**k``), before the last epoch: 4, 8 and 16 at the paper's 32 epochs in 4-epoch cycles.

Which of the two a search uses by default is ``gridsearch._scheduler_choice``'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler

from trainables.config import TrainConfig

__all__ = [
    "ParetoHalving",
    "asha_rungs",
    "asha_scheduler",
    "cycle_epochs",
    "describe_rungs",
    "make_scheduler",
    "pareto_ranks",
    "promoted",
]


def asha_rungs(epochs: int, cycle: int) -> list[int]:
    """The epochs at which ASHA compares trials: ``cycle * 2**k`` before ``epochs``."""
    rungs, rung = [], cycle
    while rung < epochs:
        rungs.append(rung)
        rung *= 2
    return rungs


def asha_scheduler(epochs: int, cycle: int) -> ASHAScheduler | None:
    """ASHA on the reported ``epoch``, rungs at ``asha_rungs`` (reduction factor 2: at a
    rung, trials below the median so far stop), every trial stopped at ``epochs``; None
    when no rung comes before the last epoch."""
    if not asha_rungs(epochs, cycle):
        return None
    return ASHAScheduler(time_attr="epoch", max_t=epochs, grace_period=cycle, reduction_factor=2)


def cycle_epochs(space_fixed: Mapping[str, Any], run_fixed: Mapping[str, Any]) -> int:
    """The learning-rate cycle of a search's trials: the space's fixed ``cycle_epochs``,
    else the run's, else TrainConfig's."""
    return int({**run_fixed, **space_fixed}.get("cycle_epochs", TrainConfig.cycle_epochs))


def describe_rungs(epochs: int, cycle: int, pareto: bool = False) -> str:
    """One line saying where ASHA compares trials (the search prints it at its start);
    ``pareto``: its two-objective form."""
    rungs = asha_rungs(epochs, cycle)
    if not rungs:
        return (
            f"ASHA compares trials at the ends of the {cycle}-epoch learning-rate cycles: "
            f"with {epochs} epochs no cycle ends before the last epoch, so no trial is "
            "stopped early"
        )
    return (
        f"ASHA compares trials at the ends of the {cycle}-epoch learning-rate cycles: at "
        f"epoch {', '.join(map(str, rungs))}, each time stopping those "
        + (
            "outside the top half by Pareto rank (dominated by enough trials on both objectives)"
            if pareto
            else "below the median so far"
        )
    )


def make_scheduler(
    kind: str,
    epochs: int,
    cycle: int,
    metric: str | Sequence[str] | None = None,
    mode: str | Sequence[str] | None = None,
) -> TrialScheduler:
    """``kind`` "asha" (see the module docstring; with two objectives in ``metric`` and
    ``mode``, :class:`ParetoHalving` on the same rungs) or "fifo" (none)."""
    if kind != "asha":
        return FIFOScheduler()
    if isinstance(metric, list | tuple) and len(metric) > 1:
        rungs = asha_rungs(epochs, cycle)
        if not rungs:
            return FIFOScheduler()
        assert isinstance(mode, list | tuple), "one mode per metric"
        return ParetoHalving(metric, mode, rungs)
    return asha_scheduler(epochs, cycle) or FIFOScheduler()


def pareto_ranks(points: Sequence[Sequence[float]]) -> list[int]:
    """Non-dominated sorting (every objective maximised): 0 for the points no other point
    dominates, 1 for those only rank-0 points dominate, and so on. A point dominates
    another when it is at least as good on every objective and better on one."""

    def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
        return all(x >= y for x, y in zip(a, b, strict=True)) and any(
            x > y for x, y in zip(a, b, strict=True)
        )

    ranks = [-1] * len(points)
    left, rank = set(range(len(points))), 0
    while left:
        front = {i for i in left if not any(dominates(points[j], points[i]) for j in left)}
        for i in front:
            ranks[i] = rank
        left -= front
        rank += 1
    return ranks


def promoted(index: int, points: Sequence[Sequence[float]], reduction_factor: float) -> bool:
    """Whether ``points[index]`` goes on at a rung holding ``points``: the top
    ``ceil(len(points) / reduction_factor)`` by Pareto rank go on, and a front that
    straddles that line goes on whole, so a trial stops only when enough trials at the
    rung dominate it. (With one objective: the top half by rank, where Ray's ASHA
    compares the new value with the median of the values before it.)"""
    ranks = pareto_ranks(points)
    keep = math.ceil(len(points) / reduction_factor)
    boundary = sorted(ranks)[keep - 1]
    return ranks[index] <= boundary


class ParetoHalving(FIFOScheduler):
    """Asynchronous successive halving on two objectives (in the spirit of MO-ASHA,
    Schmucker et al. 2021): when a trial first reports a rung epoch, its objectives join
    that rung's record, and it stops unless it is among the top 1/``reduction_factor``
    of the rung by Pareto rank (:func:`promoted`). NaN counts as the worst value. Rungs
    as ASHA's (``asha_rungs``: the ends of learning-rate cycles)."""

    def __init__(
        self,
        metrics: Sequence[str],
        modes: Sequence[str],
        rungs: Sequence[int],
        reduction_factor: float = 2,
        time_attr: str = "epoch",
    ) -> None:
        super().__init__()
        if len(metrics) != len(modes) or any(m not in ("max", "min") for m in modes):
            raise ValueError(f"metrics {metrics} and modes {modes}: one max/min per metric")
        self.metrics, self.signs = list(metrics), [1.0 if m == "max" else -1.0 for m in modes]
        self.rungs: dict[int, dict[str, tuple[float, ...]]] = {int(r): {} for r in rungs}
        self.reduction_factor, self.time_attr = reduction_factor, time_attr
        self.stopped: dict[str, int] = {}  # trial id -> the rung it stopped at

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        return True  # its objectives are its own (Tune passes only the first)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        rung = result.get(self.time_attr)
        if not isinstance(rung, int | float) or int(rung) not in self.rungs:
            return TrialScheduler.CONTINUE
        record = self.rungs[int(rung)]
        if trial.trial_id in record:  # a restored trial reporting its rung again
            return TrialScheduler.CONTINUE
        pairs = zip(self.metrics, self.signs, strict=True)
        record[trial.trial_id] = tuple(self._value(result.get(m), sign) for m, sign in pairs)
        if promoted(
            list(record).index(trial.trial_id), list(record.values()), self.reduction_factor
        ):
            return TrialScheduler.CONTINUE
        self.stopped[trial.trial_id] = int(rung)
        return TrialScheduler.STOP

    @staticmethod
    def _value(value: Any, sign: float) -> float:
        if not isinstance(value, int | float) or math.isnan(value):
            return -math.inf
        return sign * float(value)

    def debug_string(self) -> str:
        held = ", ".join(f"epoch {r}: {len(v)}" for r, v in sorted(self.rungs.items()))
        return f"ParetoHalving: trials recorded per rung {held}; {len(self.stopped)} stopped"
