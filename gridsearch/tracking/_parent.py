"""The search's own MLflow run (the parent of every trial's): what it records at the
start (the space, sampler, scheduler, budget, resources, data and code version) and at
the end (the summary, the best trial's values, the elapsed time and its status; and the
experiment's chart view rescaled to the trials' trained epochs).

At the end the parent's row of the runs table reads like a trial's, for the best trial:
every metric of the best trial on the search's objective under the trials' own names
(``dev/r10_mean_best``, ``ensemble/r10_mean``, ``test/...``), except that each objective
metric holds the best value any trial reached on it; a tag per objective,
``best_trial.<metric>``, names the trial its value comes from. "Best" is decided on dev
metrics only (``names.selectable``), as the summary decides it.

These are the search's result, not an epoch of it: they are logged at the step of the
search's last epoch (its ``epochs`` parameter), so MLflow's charts draw the parent as one
point where the trials' curves end, never as an epoch-0 point, and a ``--resume`` that
logs them again at the same step replaces them (the latest timestamp wins)."""

from __future__ import annotations

import hashlib
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mlflow.entities import RunTag
from mlflow.tracking import MlflowClient

from gridsearch._space import SearchSpace
from gridsearch.cluster import Resources
from gridsearch.settings import SearchSettings
from gridsearch.summary import TrialOutcome, best_trial
from gridsearch.tracking._artifacts import CURVE_KEYS, curve_history
from gridsearch.tracking._curves import charts_view, curve_scale, tradeoff_curve
from gridsearch.tracking._store import log_metrics, objective_metrics
from gridsearch.tracking._tags import (
    CHARTS_VIEW,
    PARENT_TAG,
    RETRIED_TRIALS_TAG,
    TRACKING_RETRIES_TAG,
    TRIAL_TAG,
    VIEW_TAG_PREFIX,
    best_trial_tag,
)
from storage import FeatureStore
from trainables import names

__all__ = [
    "best_values",
    "close_parent",
    "code_version",
    "parent_params",
    "rescale_charts_view",
    "summary_step",
]


def parent_params(
    settings: SearchSettings,
    space: SearchSpace,
    fixed: Mapping[str, Any],
    resources: Resources,
    num_samples: int,
    sampler: str,
    store: str,
    senteval: str | None,
    labels: Sequence[str] = (),
) -> dict[str, Any]:
    """The parent run's parameters; ``labels``: the keys that say what a trial tried (its
    run's name shows them)."""
    manifest = FeatureStore.open(store).location.read_bytes("manifest.json")
    return {
        "space": space.name,
        "space_definition": space.to_dict(),
        "searched": space.searched_keys(),  # the columns of the experiment's results view
        "labels": list(labels),
        "sampler": sampler,
        "scheduler": settings.scheduler,
        "seeds_per_config": settings.seeds_per_config,
        "fuse": settings.fuse,
        "objective": settings.objective,
        "num_samples": num_samples,
        "epochs": fixed["epochs"],
        "time_budget_s": settings.time_budget_s,
        "max_concurrent": resources.concurrent,
        "cpus_per_trial": resources.cpu,
        "gpus_per_trial": resources.gpu,
        "fixed": dict(fixed),
        "data": store,
        "data_manifest_sha256": hashlib.sha256(manifest).hexdigest(),
        "senteval": senteval,
        "optuna_storage": settings.optuna_storage,
        "optuna_study": settings.experiment,
        "code_version": code_version(),
    }


def code_version() -> str:
    """``git describe --always --dirty`` of this checkout, or "unknown"."""
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parent,
            timeout=10,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def close_parent(
    client: MlflowClient,
    parent: str,
    outcomes: Sequence[TrialOutcome],
    summary: str,
    unfinished: int,
    elapsed_s: float,
    interrupted: bool = False,
    tracking: str | None = None,
) -> str:
    """Record the end of the search; returns the parent's outcome: ``interrupted`` (trials
    left to run, or ``interrupted`` by a signal or a full disk before its end: a
    ``--resume`` continues), ``failed`` (every trial failed) or ``finished``. How many
    trials were retried after a failure, and ``tracking`` (what the tracking store's
    writes went through, ``WriteQueue.said``), are tags of their own."""
    client.log_text(parent, summary + "\n", "summary.txt")
    retried = {RETRIED_TRIALS_TAG: str(sum(o.retried for o in outcomes))}
    if tracking:
        retried[TRACKING_RETRIES_TAG] = tracking
    client.log_batch(parent, tags=[RunTag(k, v) for k, v in retried.items()])
    run = client.get_run(parent)
    objective = run.data.params.get("objective", "retrieval")
    values, tags = best_values(client, run.info.experiment_id, objective, outcomes)
    step = summary_step(run.data.params, values)
    log_metrics(client, parent, {**values, "search/elapsed_s": elapsed_s}, step)
    client.log_batch(parent, tags=[RunTag(k, v) for k, v in tags.items()])
    rescale_charts_view(client, run.info.experiment_id, parent, objective)
    failed_all = bool(outcomes) and all(o.status == "failed" for o in outcomes)
    stopped = bool(unfinished) or interrupted
    status = "KILLED" if stopped else "FAILED" if failed_all else "FINISHED"
    outcome = "interrupted" if stopped else status.lower()
    client.set_tag(parent, "outcome", outcome)
    client.set_terminated(parent, status)
    return outcome


def rescale_charts_view(
    client: MlflowClient, experiment_id: str, parent: str, objective: str
) -> None:
    """The experiment's chart view written again, its axes now spanning the trials'
    trained epochs (``_curves.curve_scale``): epoch 0, near chance, set them before."""
    runs = client.search_runs(
        [experiment_id], f"tags.`{PARENT_TAG}` = '{parent}'", max_results=10_000
    )
    curves = [tradeoff_curve(curve_history(client, r.info.run_id), *CURVE_KEYS) for r in runs]
    if not any(curve.epochs for curve in curves):
        return
    order_by = objective_metrics(objective)[0]
    now = int(time.time() * 1000)
    view = charts_view(*CURVE_KEYS, order_by, now, curve_scale(curves), trials=len(runs))
    client.set_experiment_tag(experiment_id, VIEW_TAG_PREFIX + CHARTS_VIEW, view)


def summary_step(params: Mapping[str, str], values: Mapping[str, float]) -> int:
    """The step of the parent's metrics: the search's last epoch (``epochs``); without
    that parameter, the last epoch of the best trial's values."""
    try:
        return int(params["epochs"])
    except (KeyError, ValueError):
        epoch = values.get("epoch", 0.0)
        return int(epoch) if epoch == epoch else 0  # NaN: no epoch


def best_values(
    client: MlflowClient, experiment_id: str, objective: str, outcomes: Sequence[TrialOutcome]
) -> tuple[dict[str, float], dict[str, str]]:
    """The parent run's metrics and ``best_trial.<metric>`` tags (see the module
    docstring): the latest value of every metric of the run of the best trial on
    ``objective``'s metric, then per objective metric the best trial's value."""
    values: dict[str, float] = {}
    tags: dict[str, str] = {}
    for rank, metric in enumerate(objective_metrics(objective)):
        best = best_trial(outcomes, names.selectable(metric))
        if best is None:
            continue
        logged = _run_metrics(client, experiment_id, best.trial_id)
        if rank == 0:
            values.update(logged)
        values[metric] = logged.get(metric, float(best.metrics[metric]))
        tags[best_trial_tag(metric)] = best.trial_id
    return values, tags


def _run_metrics(client: MlflowClient, experiment_id: str, trial_id: str) -> dict[str, float]:
    """The latest value of each metric of the trial's run, as its row shows them."""
    found = client.search_runs([experiment_id], f"tags.`{TRIAL_TAG}` = '{trial_id}'", max_results=1)
    return dict(found[0].data.metrics) if found else {}
