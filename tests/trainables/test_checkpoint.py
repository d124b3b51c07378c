"""trainables.checkpoint: the training state and the ensemble file, written and read by
one module, with a clear error for anything else."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from trainables import checkpoint, names
from trainables.checkpoint import (
    SCHEMA_VERSION,
    CheckpointError,
    EnsembleWeights,
    load_ensemble,
    load_training_state,
)
from trainables.config import TrainConfig
from trainables.data import TrainingData
from trainables.embedding import embed_captions, embed_images
from trainables.loop import Trainer
from trainables.metrics import retrieval_metrics

SMALL = dict(hidden_size=8, batch_size=8, epochs=2, snapshot_interval=1, ensemble_size=2,
             device="cpu", semantic_every=0, threads=1)  # fmt: skip


@pytest.fixture(scope="module")
def trained(tiny_world: Path) -> tuple[Trainer, list[dict[str, float]]]:
    trainer = Trainer(TrainConfig(**SMALL), TrainingData.from_store(str(tiny_world)))
    return trainer, list(trainer.run())


def test_the_training_state_says_what_it_is(trained) -> None:
    trainer, _ = trained
    state = load_training_state(trainer.save_checkpoint())
    assert state["format"] == "grounded-training-state"
    assert state["schema_version"] == SCHEMA_VERSION
    assert state["epoch"] == 2 and len(state["snapshots"]) == 2


def test_an_ensemble_file_rebuilds_the_reported_test_metrics(trained, tmp_path: Path) -> None:
    trainer, reports = trained
    weights = EnsembleWeights.from_training_state(trainer.state_dict())
    path = weights.save(tmp_path / checkpoint.ENSEMBLE_FILE)
    loaded = load_ensemble(path)
    assert loaded.weights == "snapshots" and loaded.epochs == [
        int(reports[-1][names.ensemble_epoch(k)]) for k in (1, 2)
    ]
    assert (
        loaded.config == trainer.config
        and loaded.feature_dim == trainer.train_split.features.shape[1]
    )
    models = loaded.models("cpu")
    split = trainer.test_split
    images = embed_images(models, split.features)
    captions = embed_captions(models, split.tokens, split.lengths)
    got = retrieval_metrics(images, captions)
    for name in names.RETRIEVAL:
        assert got[name] == reports[-1][names.key(names.ENSEMBLE, name)], name


def test_a_run_without_snapshots_keeps_its_final_model(trained) -> None:
    trainer, _ = trained
    state = {**trainer.state_dict(), "snapshots": []}
    weights = EnsembleWeights.from_training_state(state)
    assert weights.weights == "final model" and weights.epochs == [2]
    assert math.isnan(weights.snapshots[0]["score"])


def test_files_from_before_the_format_field_still_load(trained, tmp_path: Path) -> None:
    trainer, _ = trained
    old = {k: v for k, v in trainer.state_dict().items() if k not in ("format", "schema_version")}
    assert load_training_state(checkpoint.to_bytes(old))["epoch"] == 2
    ensemble = EnsembleWeights.from_training_state(trainer.state_dict()).to_dict()
    legacy = {k: ensemble[k] for k in ("config", "alphabet", "snapshots")}
    assert load_ensemble(checkpoint.to_bytes(legacy)).weights == "snapshots"


def _bad_files(trained, tmp_path: Path) -> dict[str, tuple[object, str]]:
    trainer, _ = trained
    good = trainer.save_checkpoint()
    ensemble = EnsembleWeights.from_training_state(trainer.state_dict())
    (tmp_path / "garbage.pt").write_bytes(b"this is not a checkpoint at all")
    (tmp_path / "truncated.pt").write_bytes(good[: len(good) // 2])
    (tmp_path / "empty.pt").write_bytes(b"")
    newer = {**trainer.state_dict(), "schema_version": SCHEMA_VERSION + 1}
    return {
        "a directory": (tmp_path, "cannot be read"),
        "missing": (tmp_path / "nope.pt", "cannot be read"),
        "garbage": (tmp_path / "garbage.pt", "not a readable grounded-training-state file"),
        "truncated": (tmp_path / "truncated.pt", "truncated"),
        "empty": (tmp_path / "empty.pt", "truncated"),
        "an ensemble": (checkpoint.to_bytes(ensemble.to_dict()), "a grounded-ensemble file"),
        "newer": (checkpoint.to_bytes(newer), f"schema version {SCHEMA_VERSION + 1}"),
        "a tensor": (_tensor_file(), "expected a grounded-training-state dictionary"),
        "keys missing": (checkpoint.to_bytes({"config": {}}), "without model, optimizer"),
    }


def _tensor_file() -> bytes:
    import io

    buffer = io.BytesIO()
    torch.save(torch.zeros(3), buffer)
    return buffer.getvalue()


def test_bad_files_are_named_and_never_advise_unsafe_loading(trained, tmp_path: Path) -> None:
    for case, (data, message) in _bad_files(trained, tmp_path).items():
        with pytest.raises(CheckpointError, match=message) as caught:
            load_training_state(data, what="the file")  # type: ignore[arg-type]
        text = str(caught.value)
        assert text.startswith("the file: ") and "weights_only=False" not in text, case
        assert "\n" not in text, case


def test_an_ensemble_of_another_format_or_without_weights(trained) -> None:
    trainer, _ = trained
    with pytest.raises(CheckpointError, match="a grounded-training-state file, expected"):
        load_ensemble(trainer.save_checkpoint())
    empty = dataclasses.replace(
        EnsembleWeights.from_training_state(trainer.state_dict()), snapshots=[]
    )
    with pytest.raises(CheckpointError, match="no weights in it"):
        load_ensemble(checkpoint.to_bytes(empty.to_dict()))


def test_a_damaged_optimiser_state_is_named_in_one_line(trained, tiny_world: Path) -> None:
    """Every way the optimiser's part of a training state can be wrong, its step count
    other than the training state's too: a ``CheckpointError`` naming the file and the
    optimiser state, never a traceback (torch's ``copy_`` would silently broadcast moments
    of a smaller shape)."""
    trainer, _ = trained
    state = trainer.state_dict()
    optimiser = state["optimizer"]
    first = optimiser["state"][0]
    group = optimiser["param_groups"][0]
    cases = {
        "fewer parameters": {**optimiser, "param_groups": [{**group, "params": [0]}]},
        "step counts differ": {
            **optimiser,
            "state": {**optimiser["state"], 0: {**first, "step": first["step"] + 1}},
        },
        "a moment's shape": {
            **optimiser,
            "state": {
                **optimiser["state"],
                0: {**first, "exp_avg": first["exp_avg"].flatten()[:1]},
            },
        },
        "no param_groups": {"state": optimiser["state"]},
        "steps not the training's": {
            **optimiser,
            "state": {i: {**e, "step": e["step"] + 1} for i, e in optimiser["state"].items()},
        },
        "not a dict": [1, 2, 3],
    }
    fresh = Trainer(trainer.config, TrainingData.from_store(str(tiny_world)))
    for case, damaged in cases.items():
        data = checkpoint.to_bytes({**state, "optimizer": damaged})
        with pytest.raises(
            CheckpointError, match=r"its optimiser state: |field 'optimizer'"
        ) as caught:
            fresh.load_checkpoint(data, what="ck.pt")
        assert str(caught.value).startswith("ck.pt: ") and "\n" not in str(caught.value), case


def test_resuming_with_another_config_names_the_fields(trained, tiny_world: Path) -> None:
    trainer, _ = trained
    other = Trainer(
        TrainConfig(**{**SMALL, "margin": 0.3, "epochs": 5}),
        TrainingData.from_store(str(tiny_world)),
    )
    with pytest.raises(CheckpointError, match=r"margin \(checkpoint 0.2, now 0.3\)") as caught:
        other.load_checkpoint(trainer.save_checkpoint())
    assert "epochs" not in str(caught.value).split("only")[0]  # epochs may change


def test_generator_states_load_on_the_cpu_whatever_the_device(trained) -> None:
    # torch.set_rng_state and cuda.set_rng_state_all refuse anything but CPU byte tensors:
    # a checkpoint mapped onto a GPU must leave them on the CPU. "meta" stands for a device
    # that is not the CPU on a machine without a GPU.
    trainer, _ = trained
    state = load_training_state(trainer.save_checkpoint(), device="meta")
    assert next(iter(state["model"].values())).device.type == "meta"
    assert state["rng"]["torch"].device.type == "cpu"
    assert all(s.device.type == "cpu" for s in state["rng"]["cuda"])
    torch.set_rng_state(state["rng"]["torch"])


HOSTILE = (None, True, -1, 1.5, "x" * 40, [], {}, {"a": 1}, torch.zeros(2), [{"epoch": "x"}])


def test_every_field_of_a_training_state_and_an_ensemble_is_checked(
    trained, tiny_world: Path
) -> None:
    """Each field of both files, every hostile type: a ``CheckpointError`` in one line
    naming the file (and the field, or the weights that do not fit), or (a value of the
    field's type) taken: never a traceback from deep in the loop or torch."""
    trainer, _ = trained
    data = TrainingData.from_store(str(tiny_world))
    state = trainer.state_dict()
    for key in state:
        for value in HOSTILE:
            fresh = Trainer(trainer.config, data)
            try:
                fresh.load_checkpoint(checkpoint.to_bytes({**state, key: value}), what="ck.pt")
            except CheckpointError as err:
                text = str(err)
                assert text.startswith("ck.pt: ") and "\n" not in text, (key, value, text)
                assert len(text) < 600, (key, value, text)
    ensemble = EnsembleWeights.from_training_state(state).to_dict()
    for key in ensemble:
        for value in HOSTILE:
            try:
                weights = load_ensemble(checkpoint.to_bytes({**ensemble, key: value}), "e.pt")
                weights.models()
            except CheckpointError as err:
                text = str(err)
                assert text.startswith("e.pt: ") and "\n" not in text, (key, value, text)
    # a weight of another shape; a snapshot of another model (a weight too many)
    wrong = {**state["model"], next(iter(state["model"])): torch.zeros(1)}
    with pytest.raises(CheckpointError, match=r"ck\.pt: its model's weights are not those of"):
        Trainer(trainer.config, data).load_checkpoint(
            checkpoint.to_bytes({**state, "model": wrong}), what="ck.pt"
        )
    snapshot = ensemble["snapshots"][0]
    other = [{**snapshot, "state": {**snapshot["state"], "x": torch.zeros(1)}}]
    with pytest.raises(CheckpointError, match=r"e\.pt: snapshot 0's weights are not those of"):
        load_ensemble(checkpoint.to_bytes({**ensemble, "snapshots": other}), "e.pt").models()
