"""SentenceEncoder: a trained model from its file, embedding raw sentences as the trainer
did, and reproducing the trainer's own reported test metrics from text."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.tolerances import assert_close
from trainables import checkpoint, names
from trainables.checkpoint import CheckpointError, EnsembleWeights
from trainables.config import TrainConfig
from trainables.data import TrainingData
from trainables.encoder import SentenceEncoder
from trainables.loop import Trainer
from trainables.metrics import retrieval_metrics

SMALL = dict(hidden_size=8, batch_size=8, epochs=2, snapshot_interval=1, ensemble_size=2,
             device="cpu", semantic_every=0, threads=1)  # fmt: skip
SENTENCES = ["A small red circle.", "", "two blue squares next to a green triangle", "x" * 300]


@pytest.fixture(scope="module")
def trained(tiny_world: Path) -> tuple[TrainingData, Trainer, dict[str, float]]:
    data = TrainingData.from_store(str(tiny_world))
    trainer = Trainer(TrainConfig(**SMALL), data)
    reports = list(trainer.run())
    return data, trainer, reports[-1]


@pytest.fixture(scope="module")
def ensemble_file(trained, tmp_path_factory) -> Path:
    _, trainer, _ = trained
    folder = tmp_path_factory.mktemp("ensemble")
    return EnsembleWeights.from_training_state(trainer.state_dict()).save(
        folder / checkpoint.ENSEMBLE_FILE
    )


def test_the_reported_test_metrics_come_back_from_raw_text(trained, ensemble_file) -> None:
    data, _, report = trained
    encoder = SentenceEncoder.load(ensemble_file, device="cpu")
    # ranked as the trainer ranks: the ensemble's summed vectors, not renormalised
    images = encoder.encode_images(data.test.features, normalize=False)
    captions = encoder.encode(list(data.test.captions), normalize=False)
    found = retrieval_metrics(images, captions)
    for key, value in found.items():
        assert value == pytest.approx(report[names.key(names.ENSEMBLE, key)], abs=1e-6), key


def test_each_sentence_is_the_normalised_sum_of_its_models(ensemble_file) -> None:
    encoder = SentenceEncoder.load(ensemble_file, device="cpu")
    got = encoder.encode(SENTENCES)
    assert got.dtype == np.float32 and got.shape == (len(SENTENCES), encoder.embedding_dim)
    for i, sentence in enumerate(SENTENCES):  # one at a time: no batching, no reordering
        chars, lengths = encoder.encoding.encode([sentence])
        with torch.inference_mode():
            total = sum(
                model.caption_encoder(torch.from_numpy(chars).long(), torch.from_numpy(lengths))
                for model in encoder.models
            )
        expected = torch.nn.functional.normalize(total, dim=1)[0].numpy()
        np.testing.assert_allclose(got[i], expected, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    raw = encoder.encode(SENTENCES, normalize=False)
    assert 1.0 < np.linalg.norm(raw, axis=1).max() <= len(encoder.models) + 1e-5


def test_deterministic_and_independent_of_batching(ensemble_file) -> None:
    encoder = SentenceEncoder.load(ensemble_file, device="cpu")
    sentences = [f"{n} red circles and {n % 3} squares" for n in range(50)]
    first = encoder.encode(sentences, batch_size=7)
    assert np.array_equal(first, encoder.encode(sentences, batch_size=7))
    # another batch size pads and sums otherwise: not the same kernels
    assert_close(encoder.encode(sentences, batch_size=256), first, same_kernels=False)
    calls: list[tuple[int, int]] = []
    encoder.encode(sentences, batch_size=2, progress=lambda d, t: calls.append((d, t)))
    assert calls[-1] == (50, 50) and [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert encoder.encode([]).shape == (0, encoder.embedding_dim)
    with pytest.raises(TypeError, match="one string"):
        encoder.encode("A red circle.")


def test_similarity_of_sentences_and_of_vectors(ensemble_file) -> None:
    encoder = SentenceEncoder.load(ensemble_file, device="cpu")
    sims = encoder.similarity(SENTENCES[:2], SENTENCES)
    assert sims.shape == (2, len(SENTENCES))
    np.testing.assert_allclose(np.diag(sims[:, :2]), 1.0, atol=1e-5)
    vectors = encoder.encode(SENTENCES, normalize=False)
    np.testing.assert_allclose(encoder.similarity(vectors, vectors[:2]), sims.T, atol=1e-5)


def test_every_kind_of_file_loads(trained, tmp_path: Path) -> None:
    _, trainer, _ = trained
    state = tmp_path / "tune" / checkpoint.TRAINER_FILE
    state.parent.mkdir()
    state.write_bytes(trainer.save_checkpoint())
    # on the CPU, as the loaded ones: this is about the files, not the device ("auto" is
    # the GPU where one is visible, and its kernels round otherwise)
    weights = EnsembleWeights.from_training_state(trainer.state_dict())
    reference = SentenceEncoder(weights, device="cpu")
    for source in (state, state.parent, str(state)):
        encoder = SentenceEncoder.load(source, device="cpu")
        assert encoder.complete and encoder.weights.epochs == reference.weights.epochs
        np.testing.assert_array_equal(encoder.encode(SENTENCES), reference.encode(SENTENCES))
    last = EnsembleWeights.last_evaluated(trainer.state_dict()).save(tmp_path / "last.pt")
    stopped = SentenceEncoder.load(last, device="cpu")
    assert not stopped.complete and stopped.weights.epochs == [SMALL["epochs"]]
    assert stopped.weights.weights == checkpoint.LAST_EVALUATED


def test_what_is_not_a_model_is_named(ensemble_file, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x00" * 100)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(ensemble_file.read_bytes()[:500])
    newer = tmp_path / "newer.pt"
    state = torch.load(ensemble_file, weights_only=True)
    newer.write_bytes(checkpoint.to_bytes({**state, "schema_version": 99}))
    cases = {
        tmp_path / "missing.pt": "no such file",
        garbage: "not a readable",
        truncated: "not a readable",
        newer: "schema version 99",
        tmp_path: "a folder without trainer.pt or ensemble.pt",
    }
    for source, message in cases.items():
        with pytest.raises(CheckpointError, match=message) as caught:
            SentenceEncoder.load(source)
        assert "weights_only=False" not in str(caught.value)


@pytest.mark.parametrize(
    "members", [["member-0", "member-1"], [f"member-{i}" for i in range(11)], ["a", "b", "c"]]
)
def test_a_folder_of_several_models_names_them_and_each_loads(
    trained, ensemble_file, tmp_path: Path, members: list[str]
) -> None:
    """A fused trial's checkpoint folder keeps one model per member folder (its training
    state, or an ensemble file), whatever the folders are called: loading the folder
    names them and the one to give instead, which loads; nothing is guessed."""
    _, trainer, _ = trained
    state = trainer.save_checkpoint()
    for i, name in enumerate(members):
        (tmp_path / name).mkdir()
        if i % 2:
            (tmp_path / name / checkpoint.ENSEMBLE_FILE).write_bytes(ensemble_file.read_bytes())
        else:
            (tmp_path / name / checkpoint.TRAINER_FILE).write_bytes(state)
    (tmp_path / "group.json").write_text('{"stopped": []}')
    (tmp_path / "empty").mkdir()  # a folder without a model is no member
    with pytest.raises(CheckpointError) as caught:
        SentenceEncoder.load(tmp_path)
    line = str(caught.value)
    assert "\n" not in line and f"a checkpoint of {len(members)} models" in line, line
    assert f"{members[0]}/, {members[1]}/" in line and "empty/" not in line, line
    if len(members) > 8:
        assert f"and {len(members) - 8} more" in line and f"{members[8]}/" not in line
    named = Path(line.rsplit("e.g. ", 1)[1])
    assert named == tmp_path / members[0]
    encoder = SentenceEncoder.load(named, device="cpu")
    assert encoder.encode(SENTENCES[:1]).shape == (1, encoder.embedding_dim)


def test_images_of_the_wrong_size_are_named(ensemble_file) -> None:
    encoder = SentenceEncoder.load(ensemble_file, device="cpu")
    with pytest.raises(ValueError, match=r"features: expected shape \(N, "):
        encoder.encode_images(np.zeros((3, 7), dtype=np.float32))
    assert dataclasses.is_dataclass(encoder.config)
