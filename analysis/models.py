"""A trained model found by its MLflow name: the lookups behind
``trainables.encoder.SentenceEncoder.load`` for anything that is not a local file.

    weights = fetch_ensemble("trial-8c1f0a2e", "sqlite:////abs/runs/mlflow.db")
    weights = fetch_ensemble("models:/margin_sweep@best-retrieval", tracking_uri)

A reference is a run id, a Tune trial id or a trial's run name (``analysis.compare``'s
lookup: the run's ``ensemble.pt`` artifact), a ``runs:/RUN_ID/PATH`` URI, or a registered
model URI (``models:/NAME@ALIAS``, ``models:/NAME/VERSION``): the ``ensemble.pt`` inside
the downloaded artifact. Errors are ``CheckpointError`` naming the reference.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from mlflow.tracking import MlflowClient

from analysis._data import (
    AnalysisError,
    check_own_artifacts,
    find_run,
    open_client,
    tracking_uri_for,
)
from analysis._ensemble import fetch_weights
from gridsearch import using_tracking_uri
from storage.cli import error_line
from trainables.checkpoint import ENSEMBLE_FILE, CheckpointError, EnsembleWeights, load_ensemble

__all__ = ["URI_SCHEMES", "fetch_ensemble"]

URI_SCHEMES = ("models:/", "runs:/")


def fetch_ensemble(ref: str, tracking_uri: str | None = None) -> EnsembleWeights:
    """The weights ``ref`` names in the tracking store at ``tracking_uri`` (default: the
    search's, ``runs/mlflow.db`` under the working directory)."""
    try:
        tracking_uri = tracking_uri_for(tracking_uri, "runs")
        client = open_client(tracking_uri)
        if ref.startswith(URI_SCHEMES):
            check_own_artifacts(tracking_uri, _location(client, ref), f"model {ref}")
            return _from_uri(ref, tracking_uri)
        return fetch_weights(client, find_run(client, ref))
    except AnalysisError as err:
        raise CheckpointError(f"model {ref}: {err}") from None


def _location(client: MlflowClient, uri: str) -> str:
    """Where the store keeps the artifacts of ``runs:/RUN/...`` or ``models:/NAME@ALIAS``
    (``models:/NAME/VERSION``); "" where it cannot say (the download says why)."""
    from mlflow.exceptions import MlflowException

    try:
        if uri.startswith("runs:/"):
            return str(
                client.get_run(uri.removeprefix("runs:/").split("/", 1)[0]).info.artifact_uri
            )
        name, _, which = uri.removeprefix("models:/").partition("/")
        if "@" in name:
            name, alias = name.split("@", 1)
            version = client.get_model_version_by_alias(name, alias)
        else:
            version = client.get_model_version(name, which.split("/", 1)[0])
        source = str(version.source)
        model_id = version.model_id or (
            source.removeprefix("models:/") if source.startswith("models:/m-") else None
        )
        if model_id:  # a logged model (its version's source names it)
            return str(client.get_logged_model(model_id).artifact_location)
        return source
    except (MlflowException, ValueError, AttributeError):
        return ""


def _from_uri(uri: str, tracking_uri: str) -> EnsembleWeights:
    import mlflow.artifacts
    from mlflow.exceptions import MlflowException

    with tempfile.TemporaryDirectory() as folder:
        try:
            with using_tracking_uri(tracking_uri):
                local = Path(
                    mlflow.artifacts.download_artifacts(
                        artifact_uri=uri,
                        dst_path=folder,
                        tracking_uri=tracking_uri,
                        registry_uri=tracking_uri,
                    )
                )
        except (MlflowException, OSError) as err:
            raise CheckpointError(f"model {uri}: cannot be fetched ({error_line(err)})") from None
        found = [local] if local.is_file() else sorted(local.rglob(ENSEMBLE_FILE))
        if len(found) != 1:
            raise CheckpointError(
                f"model {uri}: expected one {ENSEMBLE_FILE} in it, found {len(found)}"
            )
        return load_ensemble(found[0], what=f"model {uri}: {found[0].name}")
