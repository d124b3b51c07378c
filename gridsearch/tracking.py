"""MLflow tracking of a search, written by the driver only.

One parent run per search and one nested child run per trial. Trials never talk to
MLflow: the driver's :class:`TrialTracker` (a Tune callback) logs every reported epoch
with ``step=epoch``, exactly once per epoch even when a trial is retried or the search
is resumed (it reattaches to a trial's run by its ``tune.trial_id`` tag and skips the
epochs already there), and ends each run with its true status.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient
from ray.tune import Callback
from ray.tune.experiment import Trial

from gridsearch.curves import draw_tradeoff, tradeoff_curve
from trainables import names
from trainables.config import TrainConfig
from trainables.tune import CHECKPOINT_FILE

logger = logging.getLogger(__name__)

PARENT_TAG = "mlflow.parentRunId"
ROLE_TAG = "search.role"  # "search" (the parent) or "trial"
TRIAL_TAG = "tune.trial_id"
OUTCOME_TAG = "outcome"  # finished, stopped_early, failed, search_ended
_LOGGED_PREFIXES = ("dev/", "test/", "train/", "time/", "ensemble/")


class TrackingError(RuntimeError):
    """The tracking store cannot be used; raised before any trial starts."""


def default_tracking_uri(runs_dir: Path) -> str:
    return f"sqlite:///{runs_dir.resolve() / 'mlflow.db'}"


def check_reachable(uri: str) -> MlflowClient:
    """Fail now, before any trial, when the tracking store does not answer."""
    if uri.startswith(("http://", "https://")):
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    client = MlflowClient(tracking_uri=uri)
    try:
        client.search_experiments(max_results=1)
    except Exception as err:  # MLflow raises many kinds for a dead server or a bad URI
        raise TrackingError(
            f"--tracking-uri {uri}: the MLflow tracking store cannot be used "
            f"({type(err).__name__}: {str(err).splitlines()[0][:300]})"
        ) from None
    return client


def ensure_experiment(client: MlflowClient, experiment: str, artifact_root: Path) -> str:
    """Create the experiment once, here, before any trial (several trials creating it at
    once would race); reuse it when it exists. Returns its id. With a local store the
    artifacts go under ``artifact_root``; an MLflow server keeps them where it was told
    (``--artifacts-destination``, proxied to every client)."""
    found = client.get_experiment_by_name(experiment)
    if found is not None:
        return str(found.experiment_id)
    if client.tracking_uri.startswith(("http://", "https://")):
        return str(client.create_experiment(experiment))
    location = (artifact_root.resolve() / experiment).as_uri()
    return str(client.create_experiment(experiment, artifact_location=location))


def start_parent_run(
    client: MlflowClient,
    experiment_id: str,
    name: str,
    params: Mapping[str, Any],
    tags: Mapping[str, str],
    artifacts: Mapping[str, Any],
) -> str:
    """The search's run, reused when the search is resumed."""
    existing = client.search_runs([experiment_id], f"tags.`{ROLE_TAG}` = 'search'", max_results=1)
    if existing:
        run_id = existing[0].info.run_id
        client.update_run(run_id, status="RUNNING")
        client.set_tag(run_id, "resumed_at", time.strftime("%Y-%m-%d %H:%M:%S"))
        return run_id
    run = client.create_run(experiment_id, run_name=name, tags={ROLE_TAG: "search", **tags})
    client.log_batch(run.info.run_id, params=[Param(k, _param(v)) for k, v in params.items()])
    with tempfile.TemporaryDirectory() as folder:
        for filename, content in artifacts.items():
            Path(folder, filename).write_text(json.dumps(content, indent=2, default=str))
        client.log_artifacts(run.info.run_id, folder)
    return run.info.run_id


def _param(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:6000]  # MLflow's limit on a parameter value


class TrialTracker(Callback):
    """Logs each trial into a nested MLflow run (see the module docstring).

    Every write is queued and applied in order. When the tracking store stops answering,
    training goes on: the writes wait in the queue (in memory) and are retried every
    ``retry_every_s`` and once more at each new result; at the end of the search the
    tracker waits up to ``wait_s`` for the store to come back. Whatever still cannot be
    written is not lost: Tune keeps every reported epoch in its experiment, and
    :meth:`reconcile` (run at the end of every search and of every ``--resume``) writes
    what MLflow lacks from there.
    """

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
        self.experiment_id = experiment_id
        self.parent_run_id = parent_run_id
        self.tags = dict(tags)
        self.retry_every_s = retry_every_s
        self.wait_s = wait_s
        self._client = MlflowClient(tracking_uri=uri)
        self._runs: dict[str, str] = {}  # trial id -> run id
        self._logged: dict[str, set[int]] = {}  # run id -> epochs already logged
        self._closed: set[str] = set()  # run ids
        self._seen: set[str] = set()  # trial ids with any event
        self._closing: set[str] = set()  # trial ids whose run has been asked to close
        self._pending: deque[tuple[str, Callable[[], None]]] = deque()
        self._down_since: float | None = None
        self._last_try = 0.0

    @property
    def pending(self) -> int:
        """Writes not yet accepted by the tracking store."""
        return len(self._pending)

    # -- Tune hooks --------------------------------------------------------------

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
        epoch, metrics = int(result["epoch"]), _epoch_metrics(result)
        self._seen.add(trial_id)
        self._submit(
            f"epoch {epoch} of {trial_id}",
            lambda: self._log_epoch(trial_id, config, epoch, metrics),
        )

    def on_trial_complete(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        finished = names.is_finished(trial.last_result or {})
        self._request_close(
            trial,
            "finished" if finished else "stopped_early",
            "FINISHED" if finished else "KILLED",
        )

    def on_trial_error(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        error = trial.get_error()
        self._request_close(
            trial, "failed", "FAILED", error=str(error) if error is not None else "the trial failed"
        )

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        for trial in trials:
            if trial.trial_id in self._seen and trial.trial_id not in self._closing:
                self._request_close(trial, "search_ended", "KILLED")
        if self._pending and not self.flush(wait_s=self.wait_s):
            logger.error(
                "MLflow at %s did not come back within %.0f s: %d write(s) not recorded; "
                "the trials' results are safe in the Tune experiment, and --resume records "
                "them once the tracking store answers again",
                self.uri,
                self.wait_s,
                len(self._pending),
            )

    # -- the write queue -----------------------------------------------------------

    def _submit(self, what: str, write: Callable[[], None]) -> None:
        self._pending.append((what, write))
        self.flush()

    def flush(self, wait_s: float = 0.0) -> bool:
        """Apply the queued writes in order; while the store is away, retry every
        ``retry_every_s`` until ``wait_s`` has passed. True when nothing is left."""
        deadline = time.monotonic() + wait_s
        while self._pending:
            now = time.monotonic()
            if self._down_since is not None and now - self._last_try < self.retry_every_s:
                if now >= deadline:
                    return False
                time.sleep(min(self.retry_every_s - (now - self._last_try), deadline - now))
                continue
            self._last_try = time.monotonic()
            what, write = self._pending[0]
            try:
                write()
            except Exception as err:  # MLflow raises many kinds for a store that is away
                if self._reachable():
                    # The store answers but refuses this write: retrying cannot help.
                    logger.error("MLflow refused %s (%s); skipped", what, _first_line(err))
                    self._pending.popleft()
                    continue
                if self._down_since is None:
                    self._down_since = time.monotonic()
                    logger.warning(
                        "MLflow at %s is not answering (%s); training goes on and its "
                        "records wait here, retried every %.0f s",
                        self.uri,
                        _first_line(err),
                        self.retry_every_s,
                    )
                continue
            self._pending.popleft()
            if self._down_since is not None:
                logger.warning(
                    "MLflow at %s is back after %.0f s; writing the buffered records",
                    self.uri,
                    time.monotonic() - self._down_since,
                )
                self._down_since = None
        return True

    def _reachable(self) -> bool:
        try:
            self._client.search_experiments(max_results=1)
        except Exception:
            return False
        return True

    # -- runs ----------------------------------------------------------------------

    def _open(self, trial: Trial) -> None:
        trial_id, config = trial.trial_id, dict(trial.config)
        self._seen.add(trial_id)
        self._closing.discard(trial_id)  # a trial restored by --resume runs again
        self._submit(f"the run of {trial_id}", lambda: self._reopen(trial_id, config))

    def _reopen(self, trial_id: str, config: Mapping[str, Any]) -> None:
        run_id = self._run_of(trial_id, config)
        if run_id in self._closed:
            self._client.update_run(run_id, status="RUNNING")
            self._closed.discard(run_id)

    def _request_close(
        self, trial: Trial, outcome: str, status: str, error: str | None = None
    ) -> None:
        trial_id, config, checkpoint = trial.trial_id, dict(trial.config), trial.checkpoint
        self._seen.add(trial_id)
        self._closing.add(trial_id)
        self._submit(
            f"the end of {trial_id}",
            lambda: self._close(trial_id, config, outcome, status, checkpoint, error),
        )

    def _run_of(self, trial_id: str, config: Mapping[str, Any]) -> str:
        if trial_id in self._runs:
            return self._runs[trial_id]
        found = self._client.search_runs(
            [self.experiment_id], f"tags.`{TRIAL_TAG}` = '{trial_id}'", max_results=1
        )
        if found:
            run_id = found[0].info.run_id
            if found[0].info.status != "RUNNING":
                self._closed.add(run_id)
            history = self._client.get_metric_history(run_id, "epoch")
            self._logged[run_id] = {int(m.step) for m in history}
        else:
            run_id = self._create_run(trial_id, config)
            self._logged[run_id] = set()
        self._runs[trial_id] = run_id
        return run_id

    def _create_run(self, trial_id: str, trial_config: Mapping[str, Any]) -> str:
        config = TrainConfig.from_dict(train_keys(trial_config))
        number = trial_id.rsplit("_", 1)[-1]
        run = self._client.create_run(
            self.experiment_id,
            run_name=f"trial-{number}",
            tags={
                PARENT_TAG: self.parent_run_id,
                ROLE_TAG: "trial",
                TRIAL_TAG: trial_id,
                **self.tags,
            },
        )
        helpers = {f"search.{k}": v for k, v in trial_config.items() if k not in config.to_dict()}
        params = [Param(k, _param(v)) for k, v in {**config.to_dict(), **helpers}.items()]
        self._client.log_batch(run.info.run_id, params=params)
        return run.info.run_id

    def _log_epoch(
        self, trial_id: str, config: Mapping[str, Any], epoch: int, values: Mapping[str, float]
    ) -> None:
        run_id = self._run_of(trial_id, config)
        if epoch in self._logged[run_id]:
            return  # re-reported after a restore: keep the first
        stamp = int(time.time() * 1000)
        metrics = [Metric(k, v, stamp, epoch) for k, v in values.items()]
        metrics.append(Metric("epoch", float(epoch), stamp, epoch))
        for start in range(0, len(metrics), 1000):  # MLflow's batch limit
            self._client.log_batch(run_id, metrics=metrics[start : start + 1000])
        self._logged[run_id].add(epoch)

    def _close(
        self,
        trial_id: str,
        config: Mapping[str, Any],
        outcome: str,
        status: str,
        checkpoint: Any,
        error: str | None = None,
    ) -> None:
        run_id = self._run_of(trial_id, config)
        if run_id in self._closed:
            return
        if error:
            self._client.set_tag(run_id, "error", error[-5000:])
        try:
            self._log_artifacts(run_id, trial_id, config, checkpoint, outcome == "finished")
        except Exception as err:  # artifacts must never leave a run RUNNING
            if not self._reachable():
                raise  # the store went away: retry the whole close later
            logger.warning("could not log the artifacts of %s: %s", trial_id, err)
        self._client.set_tag(run_id, OUTCOME_TAG, outcome)
        self._client.set_terminated(run_id, status)
        self._closed.add(run_id)

    def _log_artifacts(
        self,
        run_id: str,
        trial_id: str,
        trial_config: Mapping[str, Any],
        checkpoint: Any,
        finished: bool,
    ) -> None:
        config = TrainConfig.from_dict(train_keys(trial_config))
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder)
            (out / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
            history = {
                key: [(m.step, m.value) for m in self._client.get_metric_history(run_id, key)]
                for key in (names.PRIMARY_RETRIEVAL, names.PRIMARY_SEMANTIC)
            }
            curve = tradeoff_curve(history, names.PRIMARY_RETRIEVAL, names.PRIMARY_SEMANTIC)
            if curve.epochs:
                draw_tradeoff(
                    curve,
                    out / "tradeoff.png",
                    f"{trial_id}: margin {config.margin:.3g}, n={config.hidden_size}, "
                    f"{config.rnn_type}/{config.pooling}",
                )
            if finished and checkpoint is not None:
                _write_ensemble(checkpoint, out / "ensemble.pt")
            self._client.log_artifacts(run_id, folder)

    # -- after the search ------------------------------------------------------------

    def reconcile(self, results: Iterable[Any], *, complete: bool) -> ReconcileReport:
        """Make MLflow agree with what Tune recorded: log every reported epoch MLflow
        lacks (the first report of an epoch wins, as during the search), close the runs
        of trials that ended while nobody could record it, and mark runs whose trial Tune
        no longer knows (the driver died before Tune saved it) as abandoned.
        ``complete``: no trial is left to run, so a trial that ended without its test
        metrics was stopped early."""
        report = ReconcileReport()
        known: set[str] = set()
        for result in results:
            trial_id = (result.metrics or {}).get("trial_id")
            if not trial_id:
                continue
            known.add(trial_id)
            config = dict(result.config or {})
            run_id = self._run_of(trial_id, config)
            frame = result.metrics_dataframe
            if frame is not None and "epoch" in frame:
                for row in frame.to_dict("records"):
                    epoch = row.get("epoch")
                    if epoch is None or epoch != epoch or int(epoch) in self._logged[run_id]:
                        continue
                    self._log_epoch(
                        trial_id, config, int(epoch), _epoch_metrics(row, from_table=True)
                    )
                    report.epochs += 1
            if run_id in self._closed:
                continue
            close: tuple[str, str, str | None]
            if result.error is not None:
                close = ("failed", "FAILED", str(result.error))
            elif names.is_finished(result.metrics or {}):
                close = ("finished", "FINISHED", None)
            elif complete:
                close = ("stopped_early", "KILLED", None)
            else:
                close = ("search_ended", "KILLED", None)
            self._close(trial_id, config, close[0], close[1], result.checkpoint, close[2])
            report.closed += 1
        running = self._client.search_runs(
            [self.experiment_id],
            f"tags.`{PARENT_TAG}` = '{self.parent_run_id}' and attributes.status = 'RUNNING'",
            max_results=10_000,
        )
        for run in running:
            if run.data.tags.get(TRIAL_TAG) not in known:
                self._client.set_tag(run.info.run_id, OUTCOME_TAG, "abandoned")
                self._client.set_tag(
                    run.info.run_id,
                    "error",
                    "the driver stopped before Tune saved this trial; the search ran "
                    "another in its place",
                )
                self._client.set_terminated(run.info.run_id, "KILLED")
                report.abandoned += 1
        return report


@dataclass
class ReconcileReport:
    epochs: int = 0  # epochs MLflow lacked
    closed: int = 0  # runs closed after the fact
    abandoned: int = 0  # runs of trials Tune no longer knows


def _epoch_metrics(result: Mapping[str, Any], *, from_table: bool = False) -> dict[str, float]:
    """The metrics of one reported epoch. ``from_table``: a row of Tune's table, where a
    metric the epoch did not report reads back as NaN."""
    return {
        k: float(v)
        for k, v in result.items()
        if k.startswith(_LOGGED_PREFIXES)
        and isinstance(v, (int, float))
        and not isinstance(v, bool)
        and not (from_table and v != v)
    }


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:300] if text else ''}"


def _write_ensemble(checkpoint: Any, target: Path) -> None:
    """The ensemble's weights (the best snapshots), from the trial's last checkpoint."""
    with checkpoint.as_directory() as folder:
        state = torch.load(Path(folder) / CHECKPOINT_FILE, map_location="cpu", weights_only=True)
    # A trial that ended before its first snapshot was evaluated with its final model
    # (Trainer.ensemble_metrics), so that model is its "ensemble".
    snapshots = state["snapshots"] or [
        {"epoch": state["epoch"], "score": float("nan"), "state": state["model"]}
    ]
    torch.save(
        {"config": state["config"], "alphabet": state["alphabet"], "snapshots": snapshots},
        target,
    )


def train_keys(config: Mapping[str, Any]) -> dict[str, Any]:
    """The TrainConfig part of a trial's config. OptunaSearch also puts every suggested
    helper parameter there (``variant`` of paper_grid, ...), which the space has already
    decoded into TrainConfig keys."""
    fields = set(TrainConfig.field_names())
    return {k: v for k, v in config.items() if k in fields}
