"""The search's own MLflow run (the parent of every trial's): what it records at the
start (the space, sampler, scheduler, budget, resources, data and code version) and at
the end (the summary, the best objective values, the elapsed time and its status)."""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient

from gridsearch._space import SearchSpace
from gridsearch.cluster import Resources
from gridsearch.settings import SearchSettings
from gridsearch.summary import TrialOutcome
from storage import FeatureStore
from trainables import names

__all__ = ["close_parent", "code_version", "parent_params"]


def parent_params(
    settings: SearchSettings,
    space: SearchSpace,
    fixed: Mapping[str, Any],
    resources: Resources,
    num_samples: int,
    sampler: str,
    store: str,
    senteval: str | None,
) -> dict[str, Any]:
    manifest = FeatureStore.open(store).location.read_bytes("manifest.json")
    return {
        "space": space.name,
        "space_definition": space.to_dict(),
        "sampler": sampler,
        "scheduler": settings.scheduler,
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
) -> str:
    """Record the end of the search; returns the parent's outcome: ``interrupted`` (trials
    left to run: a ``--resume`` continues), ``failed`` (every trial failed) or
    ``finished``."""
    client.log_text(parent, summary + "\n", "summary.txt")
    for metric in (names.BEST_RETRIEVAL, names.BEST_SEMANTIC):
        values = [o.metrics[metric] for o in outcomes if metric in o.metrics]
        if values:
            client.log_metric(parent, f"search/{metric.replace('/', '_')}", max(values))
    client.log_metric(parent, "search/elapsed_s", elapsed_s)
    failed_all = bool(outcomes) and all(o.status == "failed" for o in outcomes)
    status = "KILLED" if unfinished else "FAILED" if failed_all else "FINISHED"
    outcome = "interrupted" if unfinished else status.lower()
    client.set_tag(parent, "outcome", outcome)
    client.set_terminated(parent, status)
    return outcome
