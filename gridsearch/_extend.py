"""A ``--resume`` that continues or extends a search, or finds nothing left to run.

Tune restores a search's number of trials with its search algorithm's state and has no
way to change it: ``Tuner.restore`` takes no ``num_samples`` and the resumed ``tune.run``
ignores the one it is given (Ray 2.60, ``tune/tune.py`` and ``SearchGenerator``).
:class:`ExtendedSearch` is Tune's own ``SearchGenerator`` around the restored searcher
that raises the restored number once Tune has restored it, so the same searcher (the
same Optuna study, continued) suggests the extra trials.

A copied or moved runs directory continues where it is now: ``settings`` rebase the
record's paths (``_layout.rebase``), and ``gridsearch._relocate`` rewrites what else
names the old place before anything reads it.

A search stopped hard can leave trials that finished saved as running:
``gridsearch._settle`` marks them ended before Tune restores the experiment.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune.experiment import Trial
from ray.tune.search import ConcurrencyLimiter, Searcher, SearchGenerator

from gridsearch._groups import GroupSearcher
from gridsearch._inputs import tracking_client
from gridsearch._layout import local_path
from gridsearch._members import configurations_of
from gridsearch.settings import NothingToRun, SearchError, SearchSettings
from gridsearch.summary import report_command
from gridsearch.tracking import OUTCOME_TAG, ROLE_SEARCH, ROLE_TAG

__all__ = [
    "RAY_INTERNALS",
    "ExtendedSearch",
    "check_resume",
    "check_writable",
    "ended_trials",
    "extend",
    "resumable",
    "saved_results",
    "saved_trials",
    "use_callbacks",
    "use_signals",
]

logger = logging.getLogger(__name__)


class ExtendedSearch(SearchGenerator):
    """Tune's SearchGenerator whose number of trials, restored from the experiment, is
    raised to ``num_samples`` (never lowered)."""

    def __init__(
        self, searcher: Searcher, num_samples: int, settled: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(searcher)
        self.num_samples = num_samples
        # trials that ended before Tune's last save caught it (``settle_finished``): the
        # restored searcher is told their last result and their end, as Tune would have
        self.settled = dict(settled or {})

    def set_state(self, state: dict[str, Any]) -> None:
        if not hasattr(self, "_total_samples") or not hasattr(self, "_finished"):
            raise RuntimeError(
                "this Ray's SearchGenerator has no _total_samples/_finished (private "
                "attributes --resume relies on, see RAY_INTERNALS): install the Ray "
                "version in constraints.txt"
            )
        super().set_state(state)
        if self.num_samples > self._total_samples:
            self._total_samples = self.num_samples
            self._finished = False
        # the group searcher counts the configurations it hands out itself (Tune restored
        # it before this state, so the larger count is not overwritten)
        base = _group_searcher(self.searcher)
        if base is not None:
            base.extend(self.num_samples)
        for trial_id, last in self.settled.items():
            self.searcher.on_trial_result(trial_id, last)
            self.searcher.on_trial_complete(trial_id, result=last)
        self.settled = {}


def _group_searcher(searcher: Any) -> GroupSearcher | None:
    """The ``GroupSearcher`` inside Tune's searcher wrappers (None: a search begun before
    trials were groups)."""
    while isinstance(searcher, SearchGenerator | ConcurrencyLimiter):
        searcher = searcher.searcher
    return searcher if isinstance(searcher, GroupSearcher) else None


# Ray's private names this module relies on, because no public API does the job: Ray
# 2.60's ``Tuner.restore`` takes neither a ``num_samples`` nor new callbacks, so the
# restored ``TunerInternal`` (``Tuner._local_tuner``) is changed in place, and a
# ``SearchGenerator``'s restored count (``_total_samples``, ``_finished``) is raised.
# tests/gridsearch/test_ray_internals.py fails when an installed Ray lacks any of them.
RAY_INTERNALS = {
    "Tuner": ("_local_tuner",),
    "TunerInternal": ("_tune_config", "_run_config"),
    "SearchGenerator": ("_total_samples", "_finished"),
}


def _restored(tuner: tune.Tuner) -> Any:
    """The restored ``TunerInternal``; None through Ray Client (the tuner lives on the
    cluster). A Ray without the attribute at all is an error, never a silent skip."""
    if not hasattr(tuner, "_local_tuner"):
        raise RuntimeError(
            "this Ray's Tuner has no _local_tuner (a private attribute --resume relies on, "
            "see gridsearch/_extend.py RAY_INTERNALS): install the Ray version in "
            "constraints.txt"
        )
    return tuner._local_tuner


def extend(tuner: tune.Tuner, num_samples: int, settled: Mapping[str, Any] | None = None) -> None:
    """Make the restored ``tuner`` run up to ``num_samples`` trials (no more than it
    would anyway when that is not larger), its searcher told of the ``settled`` trials'
    ends (``settle_finished``). Through Ray Client the tuner lives on the cluster and
    cannot be reached: settings refuse to extend a search that way."""
    internal = _restored(tuner)  # Tuner.restore's TunerInternal
    if internal is None:
        return
    config = internal._tune_config  # restored from the experiment's tuner.pkl
    searcher = config.search_alg
    if isinstance(searcher, SearchGenerator):
        searcher = searcher.searcher
    config.search_alg = ExtendedSearch(searcher, num_samples, settled)


def use_callbacks(tuner: tune.Tuner, callbacks: list[Any]) -> None:
    """Give the restored ``tuner`` this driver's callbacks. ``Tuner.restore`` brings back
    the ones pickled when the search began (Ray 2.60 pickles the whole ``RunConfig`` into
    ``tuner.pkl`` and takes no new one): copies of the tracker, the progress printer and
    the disk guard that this driver never set up (its interruption, its write queue)."""
    internal = _restored(tuner)
    if internal is not None:
        internal._run_config.callbacks = list(callbacks)


def use_signals(tuner: tune.Tuner, signals: Any) -> None:
    """Give the restored ``tuner``'s group searcher this driver's signals actor (the one
    the search began with ended with its driver), before Tune restores its state and it
    tells the actor its trials' stops again."""
    internal = _restored(tuner)
    base = _group_searcher(internal._tune_config.search_alg) if internal is not None else None
    if base is not None:
        base.signals = signals


def check_resume(settings: SearchSettings) -> None:
    """Before a ``--resume`` reads any data: ``NothingToRun`` when the search ran every
    trial it was asked for (Tune holds them all terminated, its MLflow parent run is
    closed ``finished``) and ``--num-samples`` asks for no more; ``SearchError`` when
    ``--num-samples`` is below what the search recorded at its start."""
    trials = saved_trials(settings)
    if not trials:  # none, or none readable: Tune's restore says what is wrong
        return
    parent = _parent_run(settings)
    wanted = settings.num_samples
    started_with = _int(parent.data.params.get("num_samples")) if parent else None
    if wanted is not None and started_with is not None and wanted < started_with:
        raise SearchError(
            f"--num-samples {wanted}: the search {settings.experiment!r} started with "
            f"{started_with} trials, and a --resume cannot take any back"
        )
    ran = sum(configurations_of(trial.config) for trial in trials)  # every trial's members
    if wanted is not None and wanted > ran:
        return  # an extension
    if any(trial.status != Trial.TERMINATED for trial in trials):
        return  # trials to continue (or failed ones to retry)
    if parent is None or parent.info.status != "FINISHED":
        return  # MLflow has not recorded the end: the resume records it
    if parent.data.tags.get(OUTCOME_TAG) != "finished":
        return
    raise NothingToRun(
        f"the search {settings.experiment!r} has run all its {ran} trials: nothing "
        f"to run (a larger --num-samples extends it); its report: {report_command(settings)}"
    )


def _parent_run(settings: SearchSettings) -> Any:
    """The search's MLflow run, or None when the tracking store has none."""
    client = tracking_client(settings)
    experiment = client.get_experiment_by_name(settings.experiment)
    if experiment is None:
        return None
    found = client.search_runs(
        [experiment.experiment_id], f"tags.`{ROLE_TAG}` = '{ROLE_SEARCH}'", max_results=1
    )
    return found[0] if found else None


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def saved_trials(settings: SearchSettings) -> list[Any]:
    """The trials of the search's saved Tune experiment; none when it cannot be read."""
    try:
        return list(tune.ExperimentAnalysis(settings.experiment_path).trials)
    except Exception as err:  # Tune raises many kinds; nothing saved yet is one
        logger.debug("cannot read %s: %s", settings.experiment_path, err)
        return []


def ended_trials(settings: SearchSettings) -> set[str]:
    """The ids of the trials Tune's saved experiment holds as ended (ran out, stopped
    early or given up): a resumed search does not run them again. A trial cut short by
    an interruption is saved as it was (running), before Tune ends it."""
    return {
        str(t.trial_id)
        for t in saved_trials(settings)
        if t.status in (Trial.TERMINATED, Trial.ERROR)
    }


@dataclass(frozen=True)
class SavedResult:
    """A trial as Tune's saved experiment holds it, read like Tune's ``Result``."""

    metrics: dict[str, Any]
    config: dict[str, Any]
    error: str | None


def saved_results(settings: SearchSettings) -> list[SavedResult]:
    """Every trial of the saved experiment (for a driver stopped before Tune returned)."""
    return [
        SavedResult(
            dict(t.last_result or {}),
            dict(t.config or {}),
            "failed" if t.status == Trial.ERROR else None,
        )
        for t in saved_trials(settings)
    ]


def resumable(settings: SearchSettings) -> bool:
    """Whether ``--resume`` can continue the search: Tune saved its experiment. A new
    search stopped before that leaves no record (removed here), so that the same
    command starts it again."""
    try:
        if tune.Tuner.can_restore(settings.experiment_path):
            return True
    except (OSError, ValueError):
        return False
    if not settings.resume:
        settings.layout.record(settings.experiment).unlink(missing_ok=True)
    return False


def _written(settings: SearchSettings) -> list[Path]:
    """The local files and folders a resumed search writes to."""
    paths = [settings.layout.root, settings.layout.record(settings.experiment)]
    for location in (settings.experiment_path, settings.tracking_uri, settings.optuna_storage):
        path = local_path(location)
        if path is not None:
            paths.append(path)
            if location.startswith("sqlite:///"):
                paths.append(path.parent)  # sqlite writes its journal beside the file
    return paths


def check_writable(settings: SearchSettings) -> None:
    """Before a ``--resume`` writes anything: every local file and folder it writes to
    (its record, Tune experiment, MLflow store and Optuna study) takes writes; a
    read-only runs directory (or mount) is a ``SearchError`` naming the first that
    does not."""
    for path in _written(settings):
        if path.exists() and not os.access(path, os.W_OK):
            raise SearchError(
                f"--runs-dir {settings.layout.root}: {path} is read-only; a --resume writes "
                "there (its Tune experiment, MLflow store, Optuna study and record): resume "
                "a writable copy (cp -r RUNS COPY, then --runs-dir COPY)"
            )
