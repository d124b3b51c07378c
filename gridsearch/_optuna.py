"""Optuna behind Ray Tune: the sampler a space gets, the study's storage, and the
searcher that survives restores.

The study lives in sqlite (``RunsLayout.optuna_db``), named after the experiment, so it
can be resumed and inspected with Optuna's own tools. It points at the other tools: its
objectives carry the search's metric names (``dev/r10_mean_best``, as MLflow names them),
each trial Tune ran has the user attributes ``tune_trial_id`` and ``mlflow_run_id``, and
its intermediate values are reported at step = epoch, as MLflow logs them: each epoch's
own value (``dev/r10_mean``), not the running best the search selects on, which would hide
a drop; the trial's value is still its best.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping
from typing import Any

import optuna
from ray.tune.result import TRAINING_ITERATION
from ray.tune.search import ConcurrencyLimiter
from ray.tune.search.optuna import OptunaSearch

from gridsearch._sampler import STARTUP_TRIALS, SpaceFillingSampler
from gridsearch.spaces import SearchSpace, sample_config
from trainables import names
from trainables.config import inherited

__all__ = [
    "MLFLOW_RUN_ATTR",
    "TUNE_TRIAL_ATTR",
    "DefineByRun",
    "ResumableOptunaSearch",
    "StudyLinks",
    "close_leftovers",
    "make_sampler",
    "repeats_line",
    "searcher",
]

# The TrainConfig keys that are the run's, never a space's: every trial has them.
RUN_KEYS = ("epochs", "seed", "device", "threads")


def quiet() -> None:
    """Optuna's INFO lines are not ours; and a trial restored from its checkpoint reports
    its last epochs again, which the searcher ignores (as MLflow does), so Optuna's warning
    about it is noise."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", message="The reported value is ignored", module="optuna")


def make_sampler(
    space: SearchSpace, seed: int, multi_objective: bool, num_samples: int, model: str = "tpe"
) -> tuple[Any, str]:
    """Optuna's grid sampler for a space with a grid; else space-filling starts (as many
    as the budget, at most STARTUP_TRIALS) and then TPE (``model`` "gp": Optuna's
    Gaussian-process sampler). And the sampler's name."""
    if space.grid is not None:
        return optuna.samplers.GridSampler(dict(space.grid), seed=seed), "Optuna grid"
    startup = min(num_samples, STARTUP_TRIALS)
    then = {"tpe": "Optuna TPE", "gp": "Optuna GP"}[model]
    then += " (multi-objective)" if multi_objective else ""
    name = f"{startup} space-filling starts, then {then}"
    return SpaceFillingSampler(startup, seed, model), name


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
        # a run-level setting reaches only the encoder families that have it (a CPU-sized
        # hidden_size, in a space that draws word_bow), and a run-level lr_max only the
        # trials that keep the run's model size
        return {**inherited(self.fixed, sampled), **sampled, **forced}


MAX_REDRAWS = 50  # draws per trial before a repeated config is trained after all
REPEAT_OF = "repeat_of"  # user attribute of a study trial that repeated an earlier one
WARM_START = "warm_start_from"  # user attribute of a trial copied from an earlier study
TUNE_TRIAL_ATTR = "tune_trial_id"  # user attribute: the Tune trial that trained it
MLFLOW_RUN_ATTR = "mlflow_run_id"  # user attribute: that trial's MLflow run
_SPACE_DRAWS = 64  # random draws that map a define-by-run space's distributions


class ResumableOptunaSearch(OptunaSearch):
    """OptunaSearch that never trains a config twice and survives a restore replaying a
    trial the study already closed.

    No wasted draws: training is deterministic per seed, so a draw whose values (as the
    study stores them, after the space's rounding) equal an earlier trial's is not
    trained. If that trial has ended, its result is reused: the study is told the same
    value(s) for the repeat, so the sampler learns nothing false, and the searcher draws
    again. If it is still running, the repeat is closed as failed (samplers ignore
    failed trials) and the searcher draws again. Both are kept in the study with the
    user attribute ``repeat_of`` (the earlier trial's number) and counted in
    ``reused`` and ``redrawn``. After ``MAX_REDRAWS`` repeats in a row (a small space
    all tried) the repeat is trained after all.

    When the driver dies after Optuna recorded a trial's end but before Tune saved its
    experiment state, ``--resume`` runs that trial again from its checkpoint, and its
    reports would reach a finished Optuna trial (an error that stops the search). The
    study keeps what it first recorded, as MLflow does."""

    reused = 0  # repeats of an ended trial: its result told again, nothing trained
    redrawn = 0  # repeats of a running trial: closed, drawn again

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        for _ in range(MAX_REDRAWS):
            config = super().suggest(trial_id)
            trial, study = self._ot_trials[trial_id], self._ot_study
            assert study is not None  # suggest() above needs it
            earlier = _earlier_with_params(study, trial)
            if earlier is None:
                return self._trained_as(trial_id, config)
            del self._ot_trials[trial_id]  # the next super().suggest asks a new trial
            trial.set_user_attr(REPEAT_OF, earlier.number)
            if earlier.state == optuna.trial.TrialState.RUNNING:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                self.redrawn += 1
            else:  # ended: the same outcome (a pruned trial has no value)
                study.tell(trial, earlier.values, state=earlier.state)
                self.reused += 1
        return self._trained_as(trial_id, super().suggest(trial_id))

    def _trained_as(self, trial_id: str, config: dict[str, Any] | None) -> dict[str, Any] | None:
        """Mark the study trial Tune trains as ``trial_id`` with that id."""
        if trial_id in self._ot_trials:
            self._ot_trials[trial_id].set_user_attr(TUNE_TRIAL_ATTR, trial_id)
        return config

    def rename(self, trial_id: str, new_id: str) -> None:
        """The study trial suggested as ``trial_id`` is trained as ``new_id`` (a member of
        a trial's group, ``gridsearch._groups``): reported and told under that id,
        which its ``TUNE_TRIAL_ATTR`` names."""
        self._ot_trials[new_id] = self._ot_trials.pop(trial_id)
        self._trained_as(new_id, None)

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        # Ray's OptunaSearch reports at step = Tune's training_iteration, which counts
        # reports from 1 (epoch 0, the untrained model, is report 1): the step is the
        # epoch here, as in MLflow.
        if "epoch" in result:
            result = {**result, TRAINING_ITERATION: int(result["epoch"])}
        # the epoch's own value as the intermediate value (dev/r10_mean for a search on
        # dev/r10_mean_best): a running best would never show a drop
        own = _epoch_metric(self.metric, result)
        if own is not None:
            result = {**result, self.metric: result[own]}
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            super().on_trial_result(trial_id, result)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            super().on_trial_complete(trial_id, result, error)


def _epoch_metric(metric: Any, result: Mapping[str, Any]) -> str | None:
    """The key of the epoch's own value of ``metric``, a running best (``names.best``),
    where ``result`` holds it."""
    if not isinstance(metric, str):
        return None  # several objectives: Optuna keeps no intermediate values
    own = metric.removesuffix("_best")
    return own if names.best(own) == metric and own in result else None


def repeats_line(search: Any) -> str | None:
    """What the searcher did with repeated draws, in a line for the user; None if none."""
    inner = getattr(search, "searcher", search)  # inside Tune's ConcurrencyLimiter
    reused, redrawn = getattr(inner, "reused", 0), getattr(inner, "redrawn", 0)
    if not reused + redrawn:
        return None
    return (
        f"{reused + redrawn} draw(s) repeated a config already tried and were not trained: "
        f"{reused} reused the ended trial's result, {redrawn} were drawn again (a trial with "
        f"that config was running); the study keeps them with the user attribute {REPEAT_OF!r}"
    )


def _earlier_with_params(study: optuna.Study, trial: optuna.Trial) -> Any:
    """The first other trial of ``study`` with ``trial``'s values that was trained or is
    training (complete, pruned or running; not a failed one, not a repeat), or None."""
    states = (
        optuna.trial.TrialState.COMPLETE,
        optuna.trial.TrialState.PRUNED,
        optuna.trial.TrialState.RUNNING,
    )
    for other in study.get_trials(deepcopy=False, states=states):
        if (
            other.number != trial.number
            and REPEAT_OF not in other.user_attrs
            and WARM_START not in other.user_attrs  # another search's: trained here too
            and other.params == trial.params
        ):
            return other
    return None


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
    algorithm: type[ResumableOptunaSearch] = ResumableOptunaSearch,
) -> ConcurrencyLimiter:
    """The search algorithm Tune runs: Optuna's study ``study`` in ``storage_url``,
    sampling ``space`` on top of the run's ``fixed`` settings (``algorithm``: the class
    of the search, the benchmarks' subclasses)."""
    search = algorithm(
        space=DefineByRun(space, fixed),
        metric=metric,
        mode=mode,
        sampler=sampler,
        study_name=study,
        storage=optuna.storages.RDBStorage(storage_url),
    )
    # the study's objectives named after the metrics Tune reports ("Objective 0" otherwise)
    loaded = optuna.load_study(study_name=study, storage=storage_url)
    with warnings.catch_warnings():  # Optuna 5 still marks it experimental (since 3.2)
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        loaded.set_metric_names([metric] if isinstance(metric, str) else list(metric))
    return ConcurrencyLimiter(search, max_concurrent=max_concurrent)


class StudyLinks:
    """The links between the study ``study`` in ``storage_url`` and MLflow: the study
    trial Tune trained as a Tune trial id (``TUNE_TRIAL_ATTR``) gets its MLflow run id
    (``MLFLOW_RUN_ATTR``). Opened on first use."""

    def __init__(self, study: str, storage_url: str) -> None:
        self.study, self.storage_url = study, storage_url
        self._storage: optuna.storages.RDBStorage | None = None
        self._study_id = -1

    def link(self, tune_trial_id: str, run_id: str) -> int | None:
        """Give the study trial of ``tune_trial_id`` the attribute ``mlflow_run_id`` (unless
        it has ended: Optuna keeps an ended trial as it is); its number, or None when the
        study has no trial of that Tune trial."""
        if self._storage is None:
            self._storage = optuna.storages.RDBStorage(self.storage_url)
            self._study_id = self._storage.get_study_id_from_name(self.study)
        storage = self._storage
        for trial in storage.get_all_trials(self._study_id, deepcopy=False):
            if trial.user_attrs.get(TUNE_TRIAL_ATTR) != tune_trial_id:
                continue
            if trial.user_attrs.get(MLFLOW_RUN_ATTR) != run_id and not trial.state.is_finished():
                stored = storage.get_trial_id_from_study_id_trial_number(
                    self._study_id, trial.number
                )
                storage.set_trial_user_attr(stored, MLFLOW_RUN_ATTR, run_id)
            return int(trial.number)
        return None


def space_distributions(space: SearchSpace, fixed: Mapping[str, Any]) -> dict[str, Any]:
    """Every parameter a define-by-run space draws and its distribution, from random
    draws (a conditional space shows each branch it takes in ``_SPACE_DRAWS`` draws)."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    found: dict[str, Any] = {}
    draw = DefineByRun(space, fixed)
    for _ in range(_SPACE_DRAWS):
        trial = study.ask()
        draw(trial)
        found.update(trial.distributions)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return found


def warm_start(
    source: str,
    source_storage: str,
    *,
    study: str,
    storage_url: str,
    modes: list[str],
    space: SearchSpace,
    fixed: Mapping[str, Any],
) -> tuple[int, int]:
    """Copy the ended trials of the study ``source`` into the new study ``study`` (created
    here, one direction per mode in ``modes``: "max" or "min"), marked with the user
    attribute ``warm_start_from``, so the sampler starts from their results. A trial is
    left out when one of its parameters is not in ``space`` or is drawn differently
    there, or when its values do not fit the new objectives. Returns (copied, left)."""
    try:
        earlier = optuna.load_study(study_name=source, storage=source_storage)
    except KeyError:
        raise ValueError(f"no Optuna study {source!r} in {source_storage}") from None
    distributions = space_distributions(space, fixed)
    directions = [
        optuna.study.StudyDirection.MAXIMIZE if m == "max" else optuna.study.StudyDirection.MINIMIZE
        for m in modes
    ]
    target = optuna.create_study(
        study_name=study, storage=storage_url, directions=directions, load_if_exists=True
    )
    copied = left = 0
    for trial in earlier.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        fits = (
            trial.values is not None
            and len(trial.values) == len(directions)
            and REPEAT_OF not in trial.user_attrs
            and all(distributions.get(k) == d for k, d in trial.distributions.items())
        )
        if not fits:
            left += 1
            continue
        target.add_trial(
            optuna.trial.create_trial(
                params=trial.params,
                distributions=trial.distributions,
                values=trial.values,
                user_attrs={WARM_START: f"{source}#{trial.number}"},
            )
        )
        copied += 1
    return copied, left


def close_leftovers(study: str, storage_url: str) -> int:
    """Mark as failed the trials Optuna handed out but Tune never ran to the end (their
    driver was killed before Tune saved them), which would stay RUNNING in the study
    forever. Returns how many."""
    loaded = optuna.load_study(study_name=study, storage=storage_url)
    running = loaded.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    for trial in running:
        loaded.tell(trial.number, state=optuna.trial.TrialState.FAIL)
    return len(running)
