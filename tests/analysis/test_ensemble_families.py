"""analysis's rebuilt ensembles read captions with each model's own tokenizer: a word
model's ranks on the test split are the ones its training reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis._comparison import _read_split
from analysis._ensemble import Ensemble, ranks
from trainables import names
from trainables.checkpoint import EnsembleWeights
from trainables.config import TrainConfig
from trainables.data import TrainingData
from trainables.loop import Trainer
from trainables.metrics import summarise_ranks

FAMILIES = {
    "char_rnn": dict(hidden_size=8),
    "word_rnn": dict(encoder="word_rnn", hidden_size=8, word_embedding_dim=16,
                     vocab_min_count=1),
    "word_bow": dict(encoder="word_bow", word_embedding_dim=16, vocab_min_count=1),
}  # fmt: skip


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_ranks_reproduce_the_reported_test_metrics(tiny_world: Path, family: str) -> None:
    config = TrainConfig(batch_size=8, epochs=1, snapshot_interval=1, ensemble_size=1,
                         device="cpu", semantic_every=0, threads=1, **FAMILIES[family])  # fmt: skip
    trainer = Trainer(config, TrainingData.from_store(str(tiny_world)))
    report = list(trainer.run())[-1]
    weights = EnsembleWeights.from_training_state(trainer.state_dict())
    split = _read_split(str(tiny_world), "test", verify=True)
    ensemble = Ensemble(None, weights, weights.models("cpu"), split)  # type: ignore[arg-type]
    found = summarise_ranks(*ranks(ensemble))
    for key, value in found.items():
        assert value == pytest.approx(report[names.key(names.ENSEMBLE, key)], abs=1e-6), key
