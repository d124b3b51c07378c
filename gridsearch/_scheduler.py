"""When a search stops trials early: ASHA at the ends of learning-rate cycles, or FIFO.

The cyclic cosine schedule is at its minimum at the end of every cycle, where snapshots
are taken; inside a cycle the learning rate is still rising and the ranking of trials
says little (a bench trial that ended the best stood at 15.9 against 26 for others after
its first epoch). So ASHA compares trials at cycle ends, doubling (``cycle_epochs *
2**k``), before the last epoch: 4, 8 and 16 at the paper's 32 epochs in 4-epoch cycles.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler

from trainables.config import TrainConfig

__all__ = ["asha_rungs", "asha_scheduler", "cycle_epochs", "describe_rungs", "make_scheduler"]


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


def describe_rungs(epochs: int, cycle: int) -> str:
    """One line saying where ASHA compares trials (the search prints it at its start)."""
    rungs = asha_rungs(epochs, cycle)
    if not rungs:
        return (
            f"ASHA compares trials at the ends of the {cycle}-epoch learning-rate cycles: "
            f"with {epochs} epochs no cycle ends before the last epoch, so no trial is "
            "stopped early"
        )
    return (
        f"ASHA compares trials at the ends of the {cycle}-epoch learning-rate cycles: at "
        f"epoch {', '.join(map(str, rungs))}, each time stopping those below the median so far"
    )


def make_scheduler(kind: str, epochs: int, cycle: int) -> TrialScheduler:
    """``kind`` "asha" (see the module docstring) or "fifo" (none)."""
    if kind == "asha":
        return asha_scheduler(epochs, cycle) or FIFOScheduler()
    return FIFOScheduler()
