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
from collections.abc import Mapping
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
    once would race); reuse it when it exists. Returns its id."""
    found = client.get_experiment_by_name(experiment)
    if found is not None:
        return str(found.experiment_id)
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
    """Logs each trial into a nested MLflow run (see the module docstring)."""

    def __init__(
        self, uri: str, experiment_id: str, parent_run_id: str, tags: Mapping[str, str]
    ) -> None:
        self.uri = uri
        self.experiment_id = experiment_id
        self.parent_run_id = parent_run_id
        self.tags = dict(tags)
        self._client = MlflowClient(tracking_uri=uri)
        self._runs: dict[str, str] = {}  # trial id -> run id
        self._logged: dict[str, set[int]] = {}  # run id -> epochs already logged
        self._closed: set[str] = set()

    # -- Tune hooks --------------------------------------------------------------

    def on_trial_start(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self._run_of(trial)

    def on_trial_restore(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self._run_of(trial)

    def on_trial_result(
        self, iteration: int, trials: list[Trial], trial: Trial, result: dict[str, Any], **info: Any
    ) -> None:
        if "epoch" not in result:
            return
        run_id = self._run_of(trial)
        epoch = int(result["epoch"])
        if epoch in self._logged[run_id]:
            return  # re-reported after a restore: keep the first
        stamp = int(time.time() * 1000)
        metrics = [
            Metric(k, float(v), stamp, epoch)
            for k, v in result.items()
            if k.startswith(_LOGGED_PREFIXES) and isinstance(v, (int, float))
        ]
        metrics.append(Metric("epoch", float(epoch), stamp, epoch))
        for start in range(0, len(metrics), 1000):  # MLflow's batch limit
            self._client.log_batch(run_id, metrics=metrics[start : start + 1000])
        self._logged[run_id].add(epoch)

    def on_trial_complete(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        finished = names.key(names.TEST, "r10_mean") in (trial.last_result or {})
        self._close(
            trial,
            "finished" if finished else "stopped_early",
            "FINISHED" if finished else "KILLED",
        )

    def on_trial_error(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        error = trial.get_error()
        message = str(error) if error is not None else "the trial failed"
        run_id = self._run_of(trial)
        self._client.set_tag(run_id, "error", message[-5000:])
        self._close(trial, "failed", "FAILED")

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        for trial in trials:
            if trial.trial_id in self._runs and self._runs[trial.trial_id] not in self._closed:
                self._close(trial, "search_ended", "KILLED")

    # -- runs ----------------------------------------------------------------------

    def _run_of(self, trial: Trial) -> str:
        if trial.trial_id in self._runs:
            return self._runs[trial.trial_id]
        found = self._client.search_runs(
            [self.experiment_id], f"tags.`{TRIAL_TAG}` = '{trial.trial_id}'", max_results=1
        )
        if found:
            run_id = found[0].info.run_id
            if found[0].info.status != "RUNNING":
                self._client.update_run(run_id, status="RUNNING")
            history = self._client.get_metric_history(run_id, "epoch")
            self._logged[run_id] = {int(m.step) for m in history}
        else:
            run_id = self._create_run(trial)
            self._logged[run_id] = set()
        self._runs[trial.trial_id] = run_id
        return run_id

    def _create_run(self, trial: Trial) -> str:
        config = TrainConfig.from_dict(train_keys(trial.config))
        number = trial.trial_id.rsplit("_", 1)[-1]
        run = self._client.create_run(
            self.experiment_id,
            run_name=f"trial-{number}",
            tags={
                PARENT_TAG: self.parent_run_id,
                ROLE_TAG: "trial",
                TRIAL_TAG: trial.trial_id,
                **self.tags,
            },
        )
        helpers = {f"search.{k}": v for k, v in trial.config.items() if k not in config.to_dict()}
        params = [Param(k, _param(v)) for k, v in {**config.to_dict(), **helpers}.items()]
        self._client.log_batch(run.info.run_id, params=params)
        return run.info.run_id

    def _close(self, trial: Trial, outcome: str, status: str) -> None:
        run_id = self._run_of(trial)
        if run_id in self._closed:
            return
        try:
            self._log_artifacts(run_id, trial, finished=outcome == "finished")
        except Exception as err:  # artifacts must never leave a run RUNNING
            logger.warning("could not log the artifacts of %s: %s", trial.trial_id, err)
        self._client.set_tag(run_id, OUTCOME_TAG, outcome)
        self._client.set_terminated(run_id, status)
        self._closed.add(run_id)

    def _log_artifacts(self, run_id: str, trial: Trial, *, finished: bool) -> None:
        config = TrainConfig.from_dict(train_keys(trial.config))
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
                    f"{trial.trial_id}: margin {config.margin:.3g}, n={config.hidden_size}, "
                    f"{config.rnn_type}/{config.pooling}",
                )
            if finished and trial.checkpoint is not None:
                _write_ensemble(trial, out / "ensemble.pt")
            self._client.log_artifacts(run_id, folder)


def _write_ensemble(trial: Trial, target: Path) -> None:
    """The ensemble's weights (the best snapshots), from the trial's last checkpoint."""
    assert trial.checkpoint is not None
    with trial.checkpoint.as_directory() as folder:
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
