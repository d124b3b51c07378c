"""Optuna behind Ray Tune: the sampler a space gets, the study's storage, and the
searcher that survives restores.

The study lives in sqlite (``RunsLayout.optuna_db``), named after the experiment, so it
can be resumed and inspected with Optuna's own tools.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping
from typing import Any

import optuna
from ray.tune.search import ConcurrencyLimiter
from ray.tune.search.optuna import OptunaSearch

from gridsearch._sampler import STARTUP_TRIALS, SpaceFillingSampler
from gridsearch.spaces import SearchSpace, sample_config
from trainables.config import TrainConfig, applicable

ENCODER = TrainConfig.encoder  # the default family

__all__ = ["DefineByRun", "ResumableOptunaSearch", "close_leftovers", "make_sampler", "searcher"]

# The TrainConfig keys that are the run's, never a space's: every trial has them.
RUN_KEYS = ("epochs", "seed", "device", "threads")


def quiet() -> None:
    """Optuna's INFO lines are not ours; and a trial restored from its checkpoint reports
    its last epochs again, which the searcher ignores (as MLflow does), so Optuna's warning
    about it is noise."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", message="The reported value is ignored", module="optuna")


def make_sampler(
    space: SearchSpace, seed: int, multi_objective: bool, num_samples: int
) -> tuple[Any, str]:
    """Optuna's grid sampler for a space with a grid; else space-filling starts (as many
    as the budget, at most STARTUP_TRIALS) and then TPE. And the sampler's name."""
    if space.grid is not None:
        return optuna.samplers.GridSampler(dict(space.grid), seed=seed), "Optuna grid"
    startup = min(num_samples, STARTUP_TRIALS)
    tpe = "Optuna TPE" + (" (multi-objective)" if multi_objective else "")
    name = f"{startup} space-filling starts, then {tpe}"
    return SpaceFillingSampler(startup, seed), name


class DefineByRun:
    """A trial's config: the run-level settings, overridden by the space (which may search
    e.g. hidden_size), with epochs, seed, device and threads always the run's. A class,
    not a closure, because Tune pickles the searcher into its experiment checkpoints."""

    def __init__(self, space: SearchSpace, fixed: Mapping[str, Any]) -> None:
        self.space = space
        self.fixed = dict(fixed)

    def __call__(self, trial: optuna.Trial) -> dict[str, Any]:
        forced = {k: self.fixed[k] for k in RUN_KEYS}
        sampled = sample_config(self.space, trial)
        # a run-level setting reaches only the encoder families that have it (a
        # CPU-sized hidden_size, in a space that draws word_bow)
        fixed = applicable(self.fixed, sampled.get("encoder", self.fixed.get("encoder", ENCODER)))
        if "hidden_size" in sampled and "lr_max" not in sampled:
            # a run-level lr_max (the CPU-sized 1.6e-2) was tuned for the run's n, not for
            # the paper's n a space sets (paper_grid, hidden_size): the paper's rate there
            fixed.pop("lr_max", None)
        return {**fixed, **sampled, **forced}


class ResumableOptunaSearch(OptunaSearch):
    """OptunaSearch that survives a restore replaying a trial the study already closed.

    When the driver dies after Optuna recorded a trial's end but before Tune saved its
    experiment state, ``--resume`` runs that trial again from its checkpoint, and its
    reports would reach a finished Optuna trial (an error that stops the search). The
    study keeps what it first recorded, as MLflow does."""

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            super().on_trial_result(trial_id, result)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            super().on_trial_complete(trial_id, result, error)


def searcher(
    space: SearchSpace,
    fixed: Mapping[str, Any],
    sampler: Any,
    *,
    metric: str | list[str],
    mode: str | list[str],
    study: str,
    storage_url: str,
    max_concurrent: int,
) -> ConcurrencyLimiter:
    """The search algorithm Tune runs: Optuna's study ``study`` in ``storage_url``,
    sampling ``space`` on top of the run's ``fixed`` settings."""
    return ConcurrencyLimiter(
        ResumableOptunaSearch(
            space=DefineByRun(space, fixed),
            metric=metric,
            mode=mode,
            sampler=sampler,
            study_name=study,
            storage=optuna.storages.RDBStorage(storage_url),
        ),
        max_concurrent=max_concurrent,
    )


def close_leftovers(study: str, storage_url: str) -> int:
    """Mark as failed the trials Optuna handed out but Tune never ran to the end (their
    driver was killed before Tune saved them), which would stay RUNNING in the study
    forever. Returns how many."""
    loaded = optuna.load_study(study_name=study, storage=storage_url)
    running = loaded.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    for trial in running:
        loaded.tell(trial.number, state=optuna.trial.TrialState.FAIL)
    return len(running)
