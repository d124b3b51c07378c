"""SentenceEncoder.load by MLflow name (analysis.models): a run id, a Tune trial id, a
run name and a runs:/ URI, in a real sqlite tracking store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient

from gridsearch import TRIAL_TAG
from trainables import checkpoint
from trainables.checkpoint import CheckpointError, EnsembleWeights
from trainables.config import TrainConfig
from trainables.data import TrainingData
from trainables.encoder import SentenceEncoder
from trainables.loop import Trainer

SENTENCES = ["A small red circle.", "two blue squares"]


@pytest.fixture(scope="module")
def logged(tiny_world: Path, tmp_path_factory) -> tuple[str, str, Path]:
    """(tracking URI, run id, the ensemble file logged)."""
    config = TrainConfig(hidden_size=8, batch_size=8, epochs=1, snapshot_interval=1,
                         ensemble_size=1, device="cpu", semantic_every=0, threads=1)  # fmt: skip
    trainer = Trainer(config, TrainingData.from_store(str(tiny_world)))
    list(trainer.run())
    root = tmp_path_factory.mktemp("mlflow")
    ensemble = EnsembleWeights.from_training_state(trainer.state_dict()).save(
        root / checkpoint.ENSEMBLE_FILE
    )
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("models", artifact_location=(root / "art").as_uri())
    run = client.create_run(experiment, run_name="trial-abc12345", tags={TRIAL_TAG: "abc12345"})
    client.log_artifact(run.info.run_id, str(ensemble))
    client.set_terminated(run.info.run_id)
    return uri, run.info.run_id, ensemble


def test_a_logged_model_loads_by_every_name(logged) -> None:
    uri, run_id, ensemble = logged
    # on the CPU, as the ones loaded by name: the same kernels, so exactly the same vectors
    expected = SentenceEncoder.load(ensemble, device="cpu").encode(SENTENCES)
    for name in (run_id, "abc12345", "trial-abc12345", f"runs:/{run_id}/ensemble.pt"):
        encoder = SentenceEncoder.load(name, tracking_uri=uri, device="cpu")
        np.testing.assert_array_equal(encoder.encode(SENTENCES), expected, err_msg=name)


def test_unknown_names_and_stores_are_named(logged, tmp_path: Path) -> None:
    uri, run_id, _ = logged
    missing = tmp_path / "none.db"
    cases = [
        ("trial-nothere", uri, "no MLflow run has that run id"),
        ("0" * 32, uri, "no MLflow run"),
        (f"runs:/{run_id}/nothing.pt", uri, "cannot be fetched"),
        ("models:/nobody@best-retrieval", uri, "cannot be fetched"),
        (run_id, f"sqlite:///{missing}", "does not exist"),
    ]
    for name, store, message in cases:
        with pytest.raises(CheckpointError, match=message):
            SentenceEncoder.load(name, tracking_uri=store)
    assert not missing.exists()  # never created by looking
