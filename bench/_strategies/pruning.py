"""Optuna's pruners judging Tune's trials: the bridge Ray's OptunaSearch lacks (it creates
its study with ``NopPruner`` and never asks ``should_prune``)."""

from __future__ import annotations

from typing import Any

import optuna
from ray.tune.schedulers import FIFOScheduler, TrialScheduler


class OptunaPruning(FIFOScheduler):
    """An Optuna pruner judging Tune's trials, as it judges them in ``study.optimize``: a
    study of its own with ``pruner``, one Optuna trial per Tune trial (``ask``), each
    trained epoch reported to it (``Trial.report(value, epoch)``; epoch 0, the untrained
    model, is not), and the Tune trial stopped when ``should_prune()`` says so (told
    PRUNED; a trial that ends is told its last value), each value the trial's ``metric``
    (the objective's, in its ``mode``). The searcher learns of a pruned trial as of one ASHA
    stopped: its last reported value."""

    def __init__(self, pruner: optuna.pruners.BasePruner, metric: str, mode: str) -> None:
        super().__init__()
        self.objective = metric
        self.study = optuna.create_study(direction=direction(mode), pruner=pruner)
        self.trials: dict[str, optuna.Trial] = {}
        self.pruned: dict[str, int] = {}  # Tune trial id -> the epoch it was pruned at

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        return True  # its metric is its own

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        self.trials[trial.trial_id] = self.study.ask()

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        epoch = int(result["epoch"])
        ask = self.trials.get(trial.trial_id)
        if epoch < 1 or ask is None:
            return TrialScheduler.CONTINUE
        ask.report(float(result[self.objective]), epoch)
        if not ask.should_prune():
            return TrialScheduler.CONTINUE
        self.study.tell(ask, state=optuna.trial.TrialState.PRUNED)
        del self.trials[trial.trial_id]
        self.pruned[trial.trial_id] = epoch
        return TrialScheduler.STOP

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> None:
        ask = self.trials.pop(trial.trial_id, None)
        if ask is not None:
            self.study.tell(ask, float(result[self.objective]))

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        self.on_trial_remove(tune_controller, trial)

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        ask = self.trials.pop(trial.trial_id, None)
        if ask is not None:
            self.study.tell(ask, state=optuna.trial.TrialState.FAIL)


def optuna_pruner(name: str, epochs: int) -> optuna.pruners.BasePruner:
    """The pruner of strategy ``optuna-median`` (Optuna's default study's) or
    ``optuna-hyperband`` (resources in epochs, Optuna's default reduction factor)."""
    if name == "optuna-median":
        return optuna.pruners.MedianPruner()
    return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=epochs)


def direction(mode: str) -> optuna.study.StudyDirection:
    """A Tune ``mode`` ("max" or "min") as an Optuna study's direction."""
    return {"max": optuna.study.StudyDirection.MAXIMIZE,
            "min": optuna.study.StudyDirection.MINIMIZE}[mode]  # fmt: skip
