"""MLflow tracking of a search, written by the driver only.

One parent run per search and one nested run per trial. Trials never talk to MLflow: the
driver's :class:`TrialTracker` (a Tune callback) turns Tune's events into writes of
``_runs.TrialRuns`` (a trial's run, each epoch once, closed once with its true outcome)
queued in a ``_write_queue.WriteQueue``, so a tracking store that goes away never stops
training; ``reconcile`` writes whatever the queue could not, from Tune's experiment.

The tools point at each other: a trial's run carries its Tune trial id (``tune.trial_id``)
and its Optuna study and trial number (``optuna.study``, ``optuna.trial_number``); the
Optuna trial carries the Tune trial id and the run id (``gridsearch._optuna``). Tune's
own trials have no public place for attributes: the Tune trial id is the key the other
two hold. Every Tune trial is a group (``gridsearch._groups``) of one configuration or,
in a fused search, several: each member gets its own run (its ``tune.trial_id`` is the
member's id: the trial's own in a group of one, else ``<trial>-m<i>``), with its own
metrics at step = epoch and its own end. The experiment gets a chart view that opens on
the trade-off per epoch (``_curves.charts_view``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from mlflow.entities import RunTag
from mlflow.tracking import MlflowClient
from ray.tune import Callback
from ray.tune.experiment import Trial

from gridsearch._interrupt import Interruption
from gridsearch._members import Member, MemberResults, member_checkpoint, members_of
from gridsearch._optuna import StudyLinks
from gridsearch._outcome import Failures, Outcome, classify, failures_of, trial_error
from gridsearch.tracking._artifacts import CURVE_KEYS
from gridsearch.tracking._curves import charts_view
from gridsearch.tracking._reconcile import ReconcileReport, epoch_metrics, reconcile
from gridsearch.tracking._runs import TrialRuns
from gridsearch.tracking._store import objective_metrics
from gridsearch.tracking._tags import (
    CHARTS_VIEW,
    OPTUNA_STUDY_TAG,
    OPTUNA_TRIAL_TAG,
    VIEW_TAG_PREFIX,
)
from gridsearch.tracking._write_queue import WriteQueue
from trainables import names
from trainables.tune import member_metrics

__all__ = ["TrialTracker"]

logger = logging.getLogger(__name__)


class TrialTracker(Callback):
    """Logs each trial into a nested MLflow run (see the module docstring). While the
    store is away, writes wait in memory and are retried every ``retry_every_s``; the end
    of the search waits up to ``wait_s`` for it."""

    def __init__(
        self,
        uri: str,
        experiment_id: str,
        parent_run_id: str,
        tags: Mapping[str, str],
        *,
        retry_every_s: float = 5.0,
        wait_s: float = 300.0,
    ) -> None:
        self.uri = uri
        self.wait_s = wait_s
        self._client = MlflowClient(tracking_uri=uri)
        self.queue = WriteQueue(self._reachable, uri, retry_every_s=retry_every_s)
        self.runs = TrialRuns(self._client, experiment_id, parent_run_id, tags, self._reachable)
        # set by the driver: a trial that ran out of disk space stops the whole search
        self.interruption: Interruption | None = None
        self._seen: set[str] = set()  # trial ids with any event
        self._closing: set[str] = set()  # trial ids whose run has been asked to close
        self._linked: set[str] = set()  # trial ids whose run names its Optuna trial
        self._study: StudyLinks | None = None  # where the parent run says the study is
        self._no_study = False  # the parent run names no study: nothing to link
        self._member_last: dict[str, dict[str, Any]] = {}  # member id -> its last report
        self.queue.submit("the chart view", lambda: self._save_charts_view(experiment_id))

    @property
    def pending(self) -> int:
        """Writes not yet accepted by the tracking store."""
        return self.queue.pending

    def flush(self, wait_s: float = 0.0) -> bool:
        return self.queue.flush(wait_s)

    def _reachable(self) -> bool:
        try:
            self._client.search_experiments(max_results=1)
        except Exception:  # MLflow raises many kinds for a store that is away
            return False
        return True

    # -- Tune hooks ---------------------------------------------------------------

    def on_trial_start(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self._open(trial)

    def on_trial_restore(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self._open(trial)

    def on_trial_result(
        self, iteration: int, trials: list[Trial], trial: Trial, result: dict[str, Any], **info: Any
    ) -> None:
        if "epoch" not in result:
            return
        trial_id, config = trial.trial_id, dict(trial.config)
        self._seen.add(trial_id)
        reports = member_metrics(result)
        for member in members_of(trial_id, config):
            if member.position in reports and "epoch" in reports[member.position]:
                self._member_last[member.trial_id] = reports[member.position]
                self._log(member.trial_id, member.config, reports[member.position])

    def _log(self, trial_id: str, config: dict[str, Any], result: Mapping[str, Any]) -> None:
        """One epoch's report of the trial (or member) ``trial_id`` into its run."""
        epoch, metrics = int(result["epoch"]), epoch_metrics(result)
        self.queue.submit(
            f"epoch {epoch} of {trial_id}",
            lambda: self.runs.log_epoch(trial_id, config, epoch, metrics),
        )
        late = names.late_metrics(result)  # an earlier epoch's battery: at that epoch's step
        if late is not None:
            earlier, values = late
            self.queue.submit(
                f"the test battery of epoch {earlier} of {trial_id}",
                lambda: self.runs.log_late(trial_id, config, earlier, values),
            )

    def on_trial_complete(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        # Tune completes a trial that ran to its end or that the scheduler stopped.
        self._close(trial, classify(trial.last_result or {}, error=False, search_complete=True))

    def _outcome(self, member: Member, outcome: Outcome, last: Mapping[str, Any]) -> Outcome:
        """A member's own end within its trial's ``outcome``: finished once it reported
        its ensemble, stopped early when the trial ended without it (the searcher stopped
        it), else the trial's."""
        report = self._member_last.get(member.trial_id) or member_metrics(dict(last)).get(
            member.position, {}
        )
        if outcome in (Outcome.FINISHED, Outcome.STOPPED_EARLY):
            return classify(report, error=False, search_complete=True)
        return Outcome.FINISHED if names.is_finished(report) else outcome

    def on_trial_error(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self._close(trial, Outcome.FAILED, _trial_error(trial))

    def on_trial_recover(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        """Tune retries the trial after a failure: its runs say so at once (a failure for
        a full disk is not the trial's: the disk guard, before this, took it back)."""
        failures = failures_of(trial)
        if failures.count:
            for member in members_of(trial.trial_id, dict(trial.config)):
                self._mark(member.trial_id, member.config, failures)

    def mark_failures(self, outcomes: Iterable[Any]) -> None:
        """At the search's end, every trial's failures as its outcome holds them (Tune's
        count, across resumes): a run rebuilt by ``reconcile`` says them too."""
        for outcome in outcomes:
            if outcome.failures.count:
                self._mark(outcome.trial_id, dict(outcome.config), outcome.failures)

    def _mark(self, trial_id: str, config: dict[str, Any], failures: Failures) -> None:
        self.queue.submit(
            f"the failures of {trial_id}",
            lambda: self.runs.mark_failures(trial_id, config, failures),
        )

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        for trial in trials:
            if trial.trial_id in self._seen and trial.trial_id not in self._closing:
                self._close(trial, Outcome.SEARCH_ENDED)
        if self.queue.pending and not self.queue.flush(wait_s=self.wait_s):
            logger.error(
                "%s: %d write(s) not recorded; the trials' results are safe in the Tune "
                "experiment, and --resume records them once the tracking store %s",
                self.queue.why_pending(self.wait_s),
                self.queue.pending,
                "has space again" if self.queue.disk_full is not None else "answers again",
            )

    # -- runs ---------------------------------------------------------------------

    def _open(self, trial: Trial) -> None:
        trial_id, config = trial.trial_id, dict(trial.config)
        self._seen.add(trial_id)
        self._closing.discard(trial_id)  # a trial restored by --resume runs again
        for member in members_of(trial_id, config):
            self._open_run(member.trial_id, member.config)

    def _open_run(self, trial_id: str, config: dict[str, Any]) -> None:
        self.queue.submit(f"the run of {trial_id}", lambda: self.runs.reopen(trial_id, config))
        if trial_id not in self._linked:
            self.queue.submit(
                f"the Optuna links of {trial_id}", lambda: self._link(trial_id, config)
            )

    def _save_charts_view(self, experiment_id: str) -> None:
        order_by = objective_metrics(self.runs.tags.get("objective", "retrieval"))[0]
        params = self._client.get_run(self.runs.parent_run_id).data.params
        try:  # room in the view for as many trials as the search runs
            trials = int(params.get("num_samples", "4"))
        except ValueError:
            trials = 4
        view = charts_view(*CURVE_KEYS, order_by, int(time.time() * 1000), trials=trials)
        self._client.set_experiment_tag(experiment_id, VIEW_TAG_PREFIX + CHARTS_VIEW, view)

    def _link(self, trial_id: str, config: Mapping[str, Any]) -> None:
        """Link the trial's run and its Optuna trial both ways (see the module docstring).
        The study is where the parent run's parameters ``optuna_study`` and
        ``optuna_storage`` say; a study that cannot be read leaves the run unlinked,
        with a warning, and never stops a trial."""
        if self._no_study:
            return
        run_id = self.runs.run_of(trial_id, config)
        if self._study is None:
            params = self._client.get_run(self.runs.parent_run_id).data.params
            if "optuna_study" not in params or "optuna_storage" not in params:
                self._no_study = True
                return
            self._study = StudyLinks(params["optuna_study"], params["optuna_storage"])
        try:
            number = self._study.link(trial_id, run_id)
        except Exception as err:  # Optuna's storage raises many kinds; a link is not vital
            logger.warning("could not link %s to its Optuna trial: %s", trial_id, err)
            return
        if number is None:
            return
        tags = [RunTag(OPTUNA_STUDY_TAG, self._study.study), RunTag(OPTUNA_TRIAL_TAG, str(number))]
        self._client.log_batch(run_id, tags=tags)
        self._linked.add(trial_id)

    def _close(self, trial: Trial, outcome: Outcome, error: str | None = None) -> None:
        trial_id, config, checkpoint = trial.trial_id, dict(trial.config), trial.checkpoint
        self._seen.add(trial_id)
        self._closing.add(trial_id)
        for member in members_of(trial_id, config):
            own = self._outcome(member, outcome, trial.last_result or {})
            self._close_run(
                member.trial_id,
                member.config,
                own,
                member_checkpoint(checkpoint, member.position),
                error if own is Outcome.FAILED else None,
            )

    def _close_run(
        self,
        trial_id: str,
        config: dict[str, Any],
        outcome: Outcome,
        checkpoint: Any,
        error: str | None,
    ) -> None:
        self.queue.submit(
            f"the end of {trial_id}",
            lambda: self.runs.close(trial_id, config, outcome, checkpoint, error),
        )

    # -- after the search ------------------------------------------------------------

    def reconcile(self, results: Iterable[Any], *, complete: bool) -> ReconcileReport:
        """See ``_reconcile.reconcile``; and the links of runs that have none yet (the
        store was away while their trial ran). A trial's results are its members'
        (``_members.MemberResults``)."""
        results = list(MemberResults(results))
        report = reconcile(self.runs, results, complete=complete)
        for result in results:
            trial_id = (result.metrics or {}).get("trial_id")
            if trial_id and trial_id not in self._linked:
                self._link(trial_id, dict(result.config or {}))
        return report


def _trial_error(trial: Trial) -> str:
    """The failed ``trial``'s error as Tune wrote it (``_outcome.trial_error``): its run
    says more than that it failed."""
    return trial_error(trial) or "the trial failed"
