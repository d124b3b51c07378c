"""Which data a search trained on, as MLflow dataset inputs: the parent run and every
trial run name the feature store, its manifest's digest, where it is, and how many images
and captions each split holds, so that a registered model leads back to its data.

    dataset = store_dataset("/abs/runs/world")
    dataset.digest  # the first 32 hex digits of manifest.json's sha256
    json.loads(dataset.profile)["splits"]["train"]  # {"images": 96, "captions": 480}

The digest is that of ``manifest.json``, which holds every shard's sha256: the same
store gives the same digest, a store with any shard changed another. MLflow keeps at most 36
characters of a digest, so the full sha256 (the parent run's ``data_manifest_sha256``
parameter) is in the profile too.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import PurePosixPath

from mlflow.entities import Dataset, DatasetInput, InputTag
from mlflow.tracking import MlflowClient

from storage import FeatureStore, Location

__all__ = [
    "CONTEXT_SEARCH",
    "CONTEXT_TRIAL",
    "DIGEST_LENGTH",
    "copy_inputs",
    "log_store_input",
    "store_dataset",
]

DIGEST_LENGTH = 32  # hex digits of the manifest's sha256 (MLflow's limit is 36)
CONTEXT_SEARCH = "search"  # the parent run's dataset context
CONTEXT_TRIAL = "training"  # a trial's: it trains on train, selects on val, reports on test
_CONTEXT_TAG = "mlflow.data.context"  # MLflow's own: the UI shows it beside the dataset


def store_dataset(store: str) -> Dataset:
    """The feature store at ``store`` (a path or URI) as an MLflow dataset."""
    opened = FeatureStore.open(store)
    manifest = opened.manifest
    sha256 = hashlib.sha256(opened.location.read_bytes("manifest.json")).hexdigest()
    scheme, location = _where(opened.location)
    profile = {
        "dataset": manifest.dataset,
        "feature_dim": manifest.feature_dim,
        "splits": {
            name: {"images": split.images, "captions": split.captions}
            for name, split in manifest.splits.items()
        },
        "manifest_sha256": sha256,
    }
    return Dataset(
        name=PurePosixPath(location).name or manifest.dataset,
        digest=sha256[:DIGEST_LENGTH],
        source_type=scheme,
        source=json.dumps({"uri": location}),
        profile=json.dumps(profile),
    )


def _where(location: Location) -> tuple[str, str]:
    """``("local", absolute path)``, or a URI's scheme and the URI without credentials
    or query (``s3://key:secret@bucket/x?region=y`` -> ``s3://bucket/x``)."""
    if location.is_local:
        return "local", location.root
    scheme, rest = location.uri.split("://", 1)
    rest = re.sub(r"^[^/@]*@", "", rest).split("?", 1)[0].rstrip("/")
    return scheme.lower(), f"{scheme}://{rest}"


def log_store_input(client: MlflowClient, run_id: str, store: str) -> None:
    """Record on the search's run that it read the store at ``store``."""
    tags = [InputTag(_CONTEXT_TAG, CONTEXT_SEARCH)]
    client.log_inputs(run_id, [DatasetInput(store_dataset(store), tags)])


def copy_inputs(client: MlflowClient, parent_run_id: str, run_id: str) -> None:
    """Record on a trial's run the data its search's run read (none for a search recorded
    before datasets were)."""
    inputs = client.get_run(parent_run_id).inputs
    found = inputs.dataset_inputs if inputs is not None else []
    if found:
        tags = [InputTag(_CONTEXT_TAG, CONTEXT_TRIAL)]
        client.log_inputs(run_id, [DatasetInput(d.dataset, tags) for d in found])
