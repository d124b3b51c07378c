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

from analysis._data import AnalysisError, find_run, open_client, tracking_uri_for
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
            return _from_uri(ref, tracking_uri)
        return fetch_weights(client, find_run(client, ref))
    except AnalysisError as err:
        raise CheckpointError(f"model {ref}: {err}") from None


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
