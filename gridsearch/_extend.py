"""A ``--resume`` that continues or extends a search, or finds nothing left to run.

Tune restores a search's number of trials with its search algorithm's state and has no
way to change it: ``Tuner.restore`` takes no ``num_samples`` and the resumed ``tune.run``
ignores the one it is given (Ray 2.60, ``tune/tune.py`` and ``SearchGenerator``).
:class:`ExtendedSearch` is Tune's own ``SearchGenerator`` around the restored searcher
that raises the restored number once Tune has restored it, so the same searcher (the
same Optuna study, continued) suggests the extra trials.
"""

from __future__ import annotations

import logging
from typing import Any

from ray import tune
from ray.tune.experiment import Trial
from ray.tune.search import Searcher, SearchGenerator

from gridsearch._inputs import tracking_client
from gridsearch._tags import OUTCOME_TAG, ROLE_SEARCH, ROLE_TAG
from gridsearch.settings import NothingToRun, SearchError, SearchSettings
from gridsearch.summary import report_command

__all__ = ["RAY_INTERNALS", "ExtendedSearch", "check_resume", "extend", "use_callbacks"]

logger = logging.getLogger(__name__)


class ExtendedSearch(SearchGenerator):
    """Tune's SearchGenerator whose number of trials, restored from the experiment, is
    raised to ``num_samples`` (never lowered)."""

    def __init__(self, searcher: Searcher, num_samples: int) -> None:
        super().__init__(searcher)
        self.num_samples = num_samples

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


def extend(tuner: tune.Tuner, num_samples: int) -> None:
    """Make the restored ``tuner`` run up to ``num_samples`` trials (no more than it
    would anyway when that is not larger). Through Ray Client the tuner lives on the
    cluster and cannot be reached: settings refuse to extend a search that way."""
    internal = _restored(tuner)  # Tuner.restore's TunerInternal
    if internal is None:
        return
    config = internal._tune_config  # restored from the experiment's tuner.pkl
    searcher = config.search_alg
    if isinstance(searcher, SearchGenerator):
        searcher = searcher.searcher
    config.search_alg = ExtendedSearch(searcher, num_samples)


def use_callbacks(tuner: tune.Tuner, callbacks: list[Any]) -> None:
    """Give the restored ``tuner`` this driver's callbacks. ``Tuner.restore`` brings back
    the ones pickled when the search began (Ray 2.60 pickles the whole ``RunConfig`` into
    ``tuner.pkl`` and takes no new one): copies of the tracker, the progress printer and
    the disk guard that this driver never set up (its interruption, its write queue)."""
    internal = _restored(tuner)
    if internal is not None:
        internal._run_config.callbacks = list(callbacks)


def check_resume(settings: SearchSettings) -> None:
    """Before a ``--resume`` reads any data: ``NothingToRun`` when the search ran every
    trial it was asked for (Tune holds them all terminated, its MLflow parent run is
    closed ``finished``) and ``--num-samples`` asks for no more; ``SearchError`` when
    ``--num-samples`` is below what the search recorded at its start."""
    try:
        trials = tune.ExperimentAnalysis(settings.experiment_path).trials
    except Exception as err:  # Tune raises many kinds: its restore says what is wrong
        logger.debug("cannot read %s before resuming it: %s", settings.experiment_path, err)
        return
    parent = _parent_run(settings)
    wanted = settings.num_samples
    started_with = _int(parent.data.params.get("num_samples")) if parent else None
    if wanted is not None and started_with is not None and wanted < started_with:
        raise SearchError(
            f"--num-samples {wanted}: the search {settings.experiment!r} started with "
            f"{started_with} trials, and a --resume cannot take any back"
        )
    if wanted is not None and wanted > len(trials):
        return  # an extension
    if any(trial.status != Trial.TERMINATED for trial in trials):
        return  # trials to continue (or failed ones to retry)
    if parent is None or parent.info.status != "FINISHED":
        return  # MLflow has not recorded the end: the resume records it
    if parent.data.tags.get(OUTCOME_TAG) != "finished":
        return
    raise NothingToRun(
        f"the search {settings.experiment!r} has run all its {len(trials)} trials: nothing "
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
