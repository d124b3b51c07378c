"""The MLflow tracking store of a search: checked to answer before anything starts, the
experiment created once (several trials creating it at once would race), and the
search's parent run. MLflow only: no Ray, so ``analysis`` opens stores the same way."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlflow.entities import Param
from mlflow.tracking import MlflowClient

from gridsearch._tags import ROLE_SEARCH, ROLE_TAG

__all__ = [
    "TrackingError",
    "check_reachable",
    "ensure_experiment",
    "param_value",
    "start_parent_run",
]

PARAM_LIMIT = 6000  # MLflow's limit on a parameter value, in characters


class TrackingError(RuntimeError):
    """The tracking store cannot be used; raised before any trial starts."""


def check_reachable(uri: str) -> MlflowClient:
    """A client for ``uri``, failing now, before any trial, when the store does not
    answer."""
    if uri.startswith(("http://", "https://")):
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    client = MlflowClient(tracking_uri=uri)
    try:
        client.search_experiments(max_results=1)
    except Exception as err:  # MLflow raises many kinds for a dead server or a bad URI
        raise TrackingError(
            f"--tracking-uri {uri}: the MLflow tracking store cannot be used "
            f"({type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''})"
        ) from None
    return client


def ensure_experiment(client: MlflowClient, experiment: str, artifact_root: Path) -> str:
    """Create the experiment once, here, before any trial; reuse it when it exists.
    Returns its id. With a local store the artifacts go under ``artifact_root``; an
    MLflow server keeps them where it was told (``--artifacts-destination``, proxied to
    every client)."""
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
    """The search's run (``ROLE_TAG`` = ``ROLE_SEARCH``), reused when it is resumed;
    ``artifacts`` are written as JSON files."""
    existing = client.search_runs(
        [experiment_id], f"tags.`{ROLE_TAG}` = '{ROLE_SEARCH}'", max_results=1
    )
    if existing:
        run_id = existing[0].info.run_id
        client.update_run(run_id, status="RUNNING")
        client.set_tag(run_id, "resumed_at", time.strftime("%Y-%m-%d %H:%M:%S"))
        return str(run_id)
    run = client.create_run(experiment_id, run_name=name, tags={ROLE_TAG: ROLE_SEARCH, **tags})
    client.log_batch(run.info.run_id, params=[Param(k, param_value(v)) for k, v in params.items()])
    with tempfile.TemporaryDirectory() as folder:
        for filename, content in artifacts.items():
            Path(folder, filename).write_text(json.dumps(content, indent=2, default=str))
        client.log_artifacts(run.info.run_id, folder)
    return str(run.info.run_id)


def param_value(value: Any) -> str:
    """A parameter as MLflow stores it: strings as they are, the rest as JSON, cut to
    MLflow's limit."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:PARAM_LIMIT]
