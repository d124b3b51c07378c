"""MLflow tracking of a search, written by the driver only.

One parent run per search and one nested run per trial. Trials never talk to MLflow: the
driver's :class:`TrialTracker` (a Tune callback) turns Tune's events into writes of
``_runs.TrialRuns`` (a trial's run, each epoch once, closed once with its true outcome)
queued in a ``_write_queue.WriteQueue``, so a tracking store that goes away never stops
training; ``reconcile`` writes whatever the queue could not, from Tune's experiment.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from mlflow.tracking import MlflowClient
from ray.tune import Callback
from ray.tune.experiment import Trial

from gridsearch._interrupt import Interruption
from gridsearch._outcome import Outcome, classify
from gridsearch._reconcile import ReconcileReport, epoch_metrics, reconcile
from gridsearch._runs import TrialRuns
from gridsearch._write_queue import WriteQueue
from trainables import names

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
        epoch, metrics = int(result["epoch"]), epoch_metrics(result)
        self._seen.add(trial_id)
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

    def on_trial_error(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        error = trial.get_error()
        self._close(trial, Outcome.FAILED, str(error) if error is not None else "the trial failed")

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        for trial in trials:
            if trial.trial_id in self._seen and trial.trial_id not in self._closing:
                self._close(trial, Outcome.SEARCH_ENDED)
        if self.queue.pending and not self.queue.flush(wait_s=self.wait_s):
            logger.error(
                "MLflow at %s did not come back within %.0f s: %d write(s) not recorded; "
                "the trials' results are safe in the Tune experiment, and --resume records "
                "them once the tracking store answers again",
                self.uri,
                self.wait_s,
                self.queue.pending,
            )

    # -- runs ---------------------------------------------------------------------

    def _open(self, trial: Trial) -> None:
        trial_id, config = trial.trial_id, dict(trial.config)
        self._seen.add(trial_id)
        self._closing.discard(trial_id)  # a trial restored by --resume runs again
        self.queue.submit(f"the run of {trial_id}", lambda: self.runs.reopen(trial_id, config))

    def _close(self, trial: Trial, outcome: Outcome, error: str | None = None) -> None:
        trial_id, config, checkpoint = trial.trial_id, dict(trial.config), trial.checkpoint
        self._seen.add(trial_id)
        self._closing.add(trial_id)
        self.queue.submit(
            f"the end of {trial_id}",
            lambda: self.runs.close(trial_id, config, outcome, checkpoint, error),
        )

    # -- after the search ------------------------------------------------------------

    def reconcile(self, results: Iterable[Any], *, complete: bool) -> ReconcileReport:
        """See ``_reconcile.reconcile``."""
        return reconcile(self.runs, results, complete=complete)
