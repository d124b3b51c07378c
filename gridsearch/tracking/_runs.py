"""The MLflow runs of a search's trials: one nested run per trial, found again by its Tune
trial id after a retry or a ``--resume``, each epoch logged once (the first report
wins), and closed once with its outcome and artifacts.

Every method talks to MLflow directly and may raise when the store is away; the caller
(``_callback.TrialTracker``) queues them in a ``WriteQueue``, so a failed call is retried
as a whole.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from mlflow.entities import Param, RunTag
from mlflow.tracking import MlflowClient

from gridsearch._outcome import Failures, Outcome, is_disk_full
from gridsearch._space import split_trial_config
from gridsearch.summary import key_value
from gridsearch.tracking._artifacts import curve_history, trajectory_image, write_trial_artifacts
from gridsearch.tracking._lineage import copy_inputs
from gridsearch.tracking._store import log_metrics, param_value
from gridsearch.tracking._tags import (
    ERROR_TAG,
    FAILURES_TAG,
    LAST_FAILURE_TAG,
    OUTCOME_RUNNING,
    OUTCOME_TAG,
    PARENT_TAG,
    ROLE_TAG,
    ROLE_TRIAL,
    RUN_COLOUR_TAG,
    TRADEOFF_IMAGE,
    TRIAL_COLOURS,
    TRIAL_TAG,
)
from trainables import names

__all__ = ["TrialRuns", "trial_name"]

logger = logging.getLogger(__name__)
ERROR_LIMIT = 5000  # characters of an error kept in its tag (the end, where it says why)


def trial_name(trial_id: str, config: Mapping[str, Any], labels: Sequence[str]) -> str:
    """A trial's run name: ``trial-<id>`` and what it tried (its values of ``labels``),
    which MLflow's runs table and every chart's legend show:
    ``trial-3f2a91c0 margin=0.1625``."""
    tried = [key_value(k, config[k]) for k in labels if k in config]
    return " ".join([f"trial-{trial_id.rsplit('_', 1)[-1]}", *tried])


class TrialRuns:
    def __init__(
        self,
        client: MlflowClient,
        experiment_id: str,
        parent_run_id: str,
        tags: Mapping[str, str],
        reachable: Callable[[], bool] = lambda: True,
    ) -> None:
        self.client = client
        self.reachable = reachable  # does the store answer? (decides whether to retry)
        self.experiment_id = experiment_id
        self.parent_run_id = parent_run_id
        self.tags = dict(tags)  # set on every trial's run (space, objective)
        self._runs: dict[str, str] = {}  # trial id -> run id
        self._logged: dict[str, set[int]] = {}  # run id -> epochs already logged
        # run id -> epochs whose late metrics (an earlier epoch's test battery that came
        # with a later report, trainables.loop) are logged: found from MLflow once a run
        self._late: dict[str, set[int]] = {}
        self._closed: set[str] = set()  # run ids
        self._ended_as: dict[str, str] = {}  # run id -> the outcome it was closed with
        # (run id, key, step) of writes that failed: MLflow may have applied one before
        # the failure (a server gone before it answered), so its retry looks first
        self._failed: set[tuple[str, str, int]] = set()
        self._labels: list[str] | None = None  # the keys that say what a trial tried
        self._created: int | None = None  # the search's trial runs so far (their colours)

    def _label_keys(self) -> list[str]:
        """The keys that say what a trial tried (the parent run's ``labels``)."""
        if self._labels is None:
            labels = self.client.get_run(self.parent_run_id).data.params.get("labels", "[]")
            try:
                self._labels = [str(k) for k in json.loads(labels)]
            except ValueError:  # cut at MLflow's parameter limit: name the trials alone
                self._labels = []
        return self._labels

    def run_of(self, trial_id: str, config: Mapping[str, Any]) -> str:
        """The trial's run: known, found by its ``TRIAL_TAG``, or created."""
        if trial_id in self._runs:
            return self._runs[trial_id]
        found = self.client.search_runs(
            [self.experiment_id], f"tags.`{TRIAL_TAG}` = '{trial_id}'", max_results=1
        )
        if found:
            run_id = found[0].info.run_id
            if found[0].info.status != "RUNNING":
                self._closed.add(run_id)
                self._ended_as[run_id] = found[0].data.tags.get(OUTCOME_TAG, "")
            history = self.client.get_metric_history(run_id, "epoch")
            self._logged[run_id] = {int(m.step) for m in history}
        else:
            run_id = self._create(trial_id, config)
            self._logged[run_id] = set()
        self._runs[trial_id] = run_id
        return run_id

    def is_closed(self, run_id: str) -> bool:
        return run_id in self._closed

    def ended_as(self, run_id: str) -> str:
        """The outcome a closed run was closed with ("" while it runs or is unknown)."""
        return self._ended_as.get(run_id, "") if run_id in self._closed else ""

    def _next_colour(self) -> str:
        """The colour of the search's next trial run: the next of ``TRIAL_COLOURS``, after
        those of the runs earlier drivers of the search created."""
        if self._created is None:
            self._created = len(
                self.client.search_runs(
                    [self.experiment_id],
                    f"tags.`{PARENT_TAG}` = '{self.parent_run_id}'",
                    max_results=50_000,
                )
            )
        colour = TRIAL_COLOURS[self._created % len(TRIAL_COLOURS)]
        self._created += 1
        return colour

    def _create(self, trial_id: str, trial_config: Mapping[str, Any]) -> str:
        config, helpers = split_trial_config(trial_config)
        run = self.client.create_run(
            self.experiment_id,
            run_name=trial_name(trial_id, trial_config, self._label_keys()),
            tags={
                PARENT_TAG: self.parent_run_id,
                ROLE_TAG: ROLE_TRIAL,
                TRIAL_TAG: trial_id,
                OUTCOME_TAG: OUTCOME_RUNNING,
                RUN_COLOUR_TAG: self._next_colour(),
                **self.tags,
            },
        )
        values = {**config.to_dict(), **{f"search.{k}": v for k, v in helpers.items()}}
        params = [Param(k, param_value(v)) for k, v in values.items()]
        self.client.log_batch(run.info.run_id, params=params)
        copy_inputs(self.client, self.parent_run_id, run.info.run_id)  # the search's data
        return str(run.info.run_id)

    def reopen(self, trial_id: str, config: Mapping[str, Any]) -> None:
        """A trial that runs again (restored by ``--resume``) is RUNNING again."""
        run_id = self.run_of(trial_id, config)
        if run_id in self._closed:
            self.client.set_tag(run_id, OUTCOME_TAG, OUTCOME_RUNNING)
            self.client.update_run(run_id, status="RUNNING")
            self._closed.discard(run_id)

    def log_epoch(
        self, trial_id: str, config: Mapping[str, Any], epoch: int, values: Mapping[str, float]
    ) -> bool:
        """Log one epoch's metrics at ``step=epoch``; False when it already was (a trial
        restored from its checkpoint reports its last epochs again: the first wins)."""
        run_id = self.run_of(trial_id, config)
        if epoch in self._logged[run_id] or self._applied(run_id, "epoch", epoch):
            self._logged[run_id].add(epoch)
            return False
        self._log(run_id, {**values, "epoch": float(epoch)}, epoch, "epoch")
        self._logged[run_id].add(epoch)
        return True

    def log_late(
        self, trial_id: str, config: Mapping[str, Any], epoch: int, values: Mapping[str, float]
    ) -> bool:
        """Log metrics of an earlier ``epoch`` that came with a later report (its test
        battery, computed in the background: ``names.late_metrics``) at ``step=epoch``,
        where they would have been had the epoch's own report held them; False when that
        epoch's were already logged (a restored trial delivering them again)."""
        run_id = self.run_of(trial_id, config)
        if not values:
            return False
        marker = names.key(names.TEST, "semantic")
        if run_id not in self._late:  # epochs MLflow already holds a battery metric at
            self._late[run_id] = {
                int(m.step) for m in self.client.get_metric_history(run_id, marker)
            }
        key = marker if marker in values else next(iter(values))
        if epoch in self._late[run_id] or self._applied(run_id, key, epoch):
            self._late[run_id].add(epoch)
            return False
        self._log(run_id, values, epoch, key)
        self._late[run_id].add(epoch)
        return True

    def _log(self, run_id: str, values: Mapping[str, float], step: int, key: str) -> None:
        """``values`` logged at ``step``; on failure, ``key`` at ``step`` is remembered for
        ``_applied``."""
        self._failed.add((run_id, key, step))
        log_metrics(self.client, run_id, values, step)
        self._failed.discard((run_id, key, step))

    def _applied(self, run_id: str, key: str, step: int) -> bool:
        """Whether a write that failed had been applied all the same: MLflow holds its
        ``key`` at ``step``. A report's metrics are one ``log_batch`` (up to MLflow's
        1,000 a call), which the store applies whole or not at all."""
        if (run_id, key, step) not in self._failed:
            return False
        held = any(int(m.step) == step for m in self.client.get_metric_history(run_id, key))
        self._failed.discard((run_id, key, step))
        return held

    def mark_failures(self, trial_id: str, config: Mapping[str, Any], failures: Failures) -> None:
        """Say on the trial's run how often it failed and why it last did (whatever it
        ends as: a retried trial that finished is no plain success)."""
        run_id = self.run_of(trial_id, config)
        tags = [RunTag(FAILURES_TAG, str(failures.count))]
        if failures.last:
            tags.append(RunTag(LAST_FAILURE_TAG, failures.last))
        self.client.log_batch(run_id, tags=tags)

    def close(
        self,
        trial_id: str,
        config: Mapping[str, Any],
        outcome: Outcome,
        checkpoint: Any,
        error: str | None = None,
    ) -> None:
        """End the trial's run with ``outcome`` (its tag and MLflow status), its error
        and its artifacts; a run already closed is left as it is. Artifacts that cannot
        be written are logged and skipped unless the store went away (``reachable()``
        is False), in which case the whole close raises, to be retried."""
        run_id = self.run_of(trial_id, config)
        if run_id in self._closed:
            return
        if error:
            self.client.set_tag(run_id, ERROR_TAG, error[-ERROR_LIMIT:])
        try:
            self._log_artifacts(run_id, trial_id, config, checkpoint, outcome)
        except Exception as err:  # artifacts must never leave a run RUNNING
            if not self.reachable() or is_disk_full(err):
                raise  # the store went away, or its disk filled: retry the whole close later
            logger.warning("could not log the artifacts of %s: %s", trial_id, err)
        self.client.set_tag(run_id, OUTCOME_TAG, outcome.value)
        self.client.set_terminated(run_id, outcome.status)
        self._closed.add(run_id)
        self._ended_as[run_id] = outcome.value

    def _log_artifacts(
        self,
        run_id: str,
        trial_id: str,
        trial_config: Mapping[str, Any],
        checkpoint: Any,
        outcome: Outcome,
    ) -> None:
        config, _ = split_trial_config(trial_config)
        history = curve_history(self.client, run_id)
        with tempfile.TemporaryDirectory() as folder:
            write_trial_artifacts(
                Path(folder),
                trial_id,
                config,
                history,
                checkpoint,
                finished=outcome is Outcome.FINISHED,
            )
            self.client.log_artifacts(run_id, folder)
        colour = self.client.get_run(run_id).data.tags.get(RUN_COLOUR_TAG, TRIAL_COLOURS[0])
        image = trajectory_image(history, colour)
        if image is not None:  # one image, at step 0: the chart view shows it (_curves)
            self.client.log_image(run_id, image, key=TRADEOFF_IMAGE, step=0, synchronous=True)

    def _running(self) -> list[Any]:
        """The runs of this search's trials still RUNNING in MLflow."""
        return list(
            self.client.search_runs(
                [self.experiment_id],
                f"tags.`{PARENT_TAG}` = '{self.parent_run_id}' and attributes.status = 'RUNNING'",
                max_results=10_000,
            )
        )

    def end_running(self, outcome: Outcome) -> int:
        """Close every run of this search still RUNNING with ``outcome`` (its tag and
        status; no artifacts): the driver stopped before Tune ended its trials. Returns
        how many."""
        ended = 0
        for run in self._running():
            self.client.set_tag(run.info.run_id, OUTCOME_TAG, outcome.value)
            self.client.set_terminated(run.info.run_id, outcome.status)
            self._closed.add(run.info.run_id)
            ended += 1
        return ended

    def abandon_unknown(self, known: Collection[str]) -> int:
        """Close as ``abandoned`` every run of this search still RUNNING whose trial Tune
        no longer knows (its driver died before Tune saved it; the resumed search ran
        another trial in its place). Returns how many."""
        abandoned = 0
        for run in self._running():
            if run.data.tags.get(TRIAL_TAG) in known:
                continue
            self.client.set_tag(run.info.run_id, OUTCOME_TAG, Outcome.ABANDONED.value)
            self.client.set_tag(
                run.info.run_id,
                ERROR_TAG,
                "the driver stopped before Tune saved this trial; the search ran another in "
                "its place",
            )
            self.client.set_terminated(run.info.run_id, Outcome.ABANDONED.status)
            abandoned += 1
        return abandoned
