"""Every trial keeps a usable model: its ensemble when it finished, else the model of the
last epoch it evaluated, marked so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ray.tune import Checkpoint

from gridsearch.tracking._artifacts import CURVE_KEYS, write_trial_artifacts
from trainables import checkpoint
from trainables.checkpoint import load_ensemble
from trainables.config import TrainConfig
from trainables.data import TrainingData
from trainables.encoder import SentenceEncoder
from trainables.loop import Trainer

CONFIG = TrainConfig(hidden_size=8, batch_size=8, epochs=2, snapshot_interval=1,
                     ensemble_size=2, device="cpu", semantic_every=0, threads=1)  # fmt: skip


@pytest.fixture(scope="module")
def tune_checkpoint(tiny_world: Path, tmp_path_factory) -> Checkpoint:
    trainer = Trainer(CONFIG, TrainingData.from_store(str(tiny_world)))
    list(trainer.run())
    folder = tmp_path_factory.mktemp("checkpoint")
    (folder / checkpoint.TRAINER_FILE).write_bytes(trainer.save_checkpoint())
    return Checkpoint.from_directory(folder)


@pytest.mark.parametrize("finished", [True, False])
def test_every_trial_with_a_checkpoint_keeps_a_model(tune_checkpoint, tmp_path, finished) -> None:
    history = {key: [(1, 10.0), (2, 20.0)] for key in CURVE_KEYS}
    write_trial_artifacts(tmp_path, "t1", CONFIG, history, tune_checkpoint, finished=finished)
    assert json.loads((tmp_path / "config.json").read_text()) == CONFIG.to_dict()
    assert (tmp_path / "tradeoff.png").stat().st_size > 0
    weights = load_ensemble(tmp_path / checkpoint.ENSEMBLE_FILE)
    if finished:
        assert weights.weights == "snapshots" and sorted(weights.epochs) == [1, 2]
    else:
        assert weights.weights == checkpoint.LAST_EVALUATED and weights.epochs == [2]
    encoder = SentenceEncoder(weights, device="cpu")
    assert encoder.complete is finished
    assert encoder.encode(["a red circle"]).shape == (1, encoder.embedding_dim)


def test_a_trial_without_a_checkpoint_keeps_no_model(tmp_path) -> None:
    write_trial_artifacts(tmp_path, "t1", CONFIG, {}, None, finished=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]
