"""A configuration's seeds trained as one fused model (``trainables.seeds`` with
``trainables._fused_seeds``) report what they report trained one after the other: the
same keys at the same epochs, the same values (float64 on the CPU, within
``FUSED_TRAINING``), with the dev semantic score and the test battery on; a fused
group's checkpoint resumes it (fused or not) as if it had not stopped; a configuration
the fused path does not take trains one after the other and the log says why."""

from __future__ import annotations

import logging
import math
from collections.abc import Generator
from pathlib import Path
from typing import cast

import pytest
import torch

from storage.senteval import SemanticBenchmark, load_senteval
from tests.tolerances import FUSED_TRAINING
from trainables import names
from trainables.checkpoint import load_training_state
from trainables.config import ConfigError, TrainConfig
from trainables.data import TrainingData, default_senteval
from trainables.device import resolve_device
from trainables.seeds import FUSED_SEEDS_ENV, SeedGroup, state_file
from trainables.tune import epoch_progress

SMALL = dict(
    hidden_size=8,
    batch_size=8,
    epochs=3,
    snapshot_interval=1,
    ensemble_size=2,
    lr_max=3e-3,
    device="cpu",
    semantic_every=1,
    threads=1,
    seed=5,
)


pytestmark = pytest.mark.usefixtures("float64")  # tests/trainables/conftest.py


@pytest.fixture(scope="module")
def data(float64_data: TrainingData) -> TrainingData:
    return float64_data


@pytest.fixture(scope="module")
def bench(tiny_world: Path) -> SemanticBenchmark:
    senteval = default_senteval(str(tiny_world))
    assert senteval is not None
    return load_senteval(senteval)


def _measured(key: str) -> bool:
    """Keys that measure the model (not how long it took)."""
    return not key.startswith("time/") and key != names.CAPTIONS_PER_S


def assert_same_reports(actual: list[dict[str, float]], expected: list[dict[str, float]]) -> None:
    assert [r["epoch"] for r in actual] == [r["epoch"] for r in expected]
    for got, want in zip(actual, expected, strict=True):
        epoch = int(want["epoch"])
        assert sorted(got) == sorted(want), f"epoch {epoch}: {set(got) ^ set(want)}"
        for key in filter(_measured, want):
            if math.isnan(want[key]):
                assert math.isnan(got[key]), f"epoch {epoch}: {key}"
                continue
            assert got[key] == pytest.approx(
                want[key], rel=FUSED_TRAINING.rtol, abs=FUSED_TRAINING.atol
            ), f"epoch {epoch}: {key}"


@pytest.mark.slow
def test_fused_seeds_report_what_seeds_one_after_the_other_report(
    data: TrainingData, bench: SemanticBenchmark
) -> None:
    config = TrainConfig(**SMALL)  # type: ignore[arg-type]
    fused = SeedGroup(config, data, bench, k=3, fused=True, complete_at={2})
    alone = SeedGroup(config, data, bench, k=3, fused=False, complete_at={2})
    assert fused.fused and not alone.fused
    reports, expected = list(fused.run()), list(alone.run())
    assert_same_reports(reports, expected)
    final, battery = reports[-1], names.key(names.TEST, "semantic")
    assert names.PRIMARY_SEMANTIC in reports[0] and battery in reports[2]  # complete_at
    assert names.key(names.ENSEMBLE, "semantic") in final and names.spread(battery) in final
    assert final[names.spread(names.BEST_RETRIEVAL)] > 0  # three seeds, three models
    for mine, theirs in zip(fused.trainers, alone.trainers, strict=True):
        assert_same_reports(mine.history, theirs.history)  # each seed's own, battery filed
        assert [s.epoch for s in mine.snapshots] == [s.epoch for s in theirs.snapshots]
        for key, value in theirs.model.state_dict().items():
            torch.testing.assert_close(
                mine.model.state_dict()[key], value, rtol=FUSED_TRAINING.rtol,
                atol=FUSED_TRAINING.atol,
            )  # fmt: skip
    # the cost of the group is what the fused epochs took, shared out to the seeds
    assert reports[1][names.TRAIN_SECONDS] > 0


def _checkpoint_at(group: SeedGroup, epoch: int, folder: Path) -> list[dict[str, float]]:
    """Run ``group`` to its report of ``epoch`` and checkpoint it, as the trainable does."""
    run = cast(Generator[dict[str, float], None, None], group.run())
    reports = [next(run) for _ in range(epoch + 1)]
    group.save(folder)
    run.close()
    return reports


@pytest.mark.slow
def test_a_fused_group_resumes_from_its_checkpoint(
    data: TrainingData, bench: SemanticBenchmark, tmp_path: Path
) -> None:
    config = TrainConfig(**SMALL)  # type: ignore[arg-type]
    whole = list(SeedGroup(config, data, bench, k=2, fused=True).run())
    fused_dir, alone_dir = tmp_path / "fused", tmp_path / "alone"
    fused_dir.mkdir()
    alone_dir.mkdir()
    first = _checkpoint_at(SeedGroup(config, data, bench, k=2, fused=True), 1, fused_dir)
    _checkpoint_at(SeedGroup(config, data, bench, k=2, fused=False), 1, alone_dir)
    assert sorted(p.name for p in fused_dir.iterdir()) == sorted([state_file(0), state_file(1)])
    # each seed's file is a lone Trainer's checkpoint: the same state, Adam's included
    for i in range(2):
        mine = load_training_state(fused_dir / state_file(i), torch.device("cpu"))
        theirs = load_training_state(alone_dir / state_file(i), torch.device("cpu"))
        assert (mine["epoch"], mine["step"]) == (theirs["epoch"], theirs["step"])
        ours, its = mine["optimizer"], theirs["optimizer"]
        assert ours["param_groups"] == its["param_groups"]
        assert sorted(ours["state"]) == sorted(its["state"])
        for index, entry in its["state"].items():
            assert sorted(ours["state"][index]) == sorted(entry)
            for key, value in entry.items():
                torch.testing.assert_close(
                    ours["state"][index][key], value, rtol=FUSED_TRAINING.rtol,
                    atol=FUSED_TRAINING.atol,
                )  # fmt: skip
    for fused in (True, False):  # a fused checkpoint resumes fused or one after the other
        resumed = SeedGroup(config, data, bench, k=2, fused=fused)
        resumed.load(fused_dir)
        rest = list(resumed.run())
        assert [r["epoch"] for r in rest] == [2.0, 3.0]
        assert_same_reports([first[1], *rest], whole[1:])  # late batteries come again
    resumed = SeedGroup(config, data, bench, k=2, fused=True)  # and a sequential one fused
    resumed.load(alone_dir)
    assert_same_reports(list(resumed.run()), whole[2:])


def test_a_configuration_the_fused_path_does_not_take_trains_one_after_the_other(
    data: TrainingData, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = TrainConfig(**{**SMALL, "loss": "pearson", "semantic_every": 0, "epochs": 1})  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="trainables.seeds"):
        group = SeedGroup(config, data, None, k=2)
    assert not group.fused
    said = [r.getMessage() for r in caplog.records if "one after the other" in r.getMessage()]
    if resolve_device(config.device).type == "cuda":  # where auto would fuse: says why not
        (message,) = said
        assert "loss" in message and "pearson" in message
    else:  # a CPU trains seeds one after the other anyway: nothing to explain
        assert said == []
    assert len(list(group.run())) == 2
    with pytest.raises(ConfigError, match="loss"):
        SeedGroup(config, data, None, k=2, fused=True)
    monkeypatch.setenv(FUSED_SEEDS_ENV, "fused")  # the environment's strict mode
    with pytest.raises(ConfigError, match="loss"):
        SeedGroup(config, data, None, k=2)
    fusable = TrainConfig(**{**SMALL, "semantic_every": 0})  # type: ignore[arg-type]
    monkeypatch.setenv(FUSED_SEEDS_ENV, "sequential")
    assert not SeedGroup(fusable, data, None, k=2).fused
    monkeypatch.setenv(FUSED_SEEDS_ENV, "auto")  # fused where the seeds train on a GPU
    on_gpu = resolve_device(fusable.device).type == "cuda"
    assert SeedGroup(fusable, data, None, k=2).fused == on_gpu
    assert not SeedGroup(fusable, data, None, k=1).fused  # one seed: nothing to fuse
    monkeypatch.setenv(FUSED_SEEDS_ENV, "sometimes")
    with pytest.raises(ValueError, match=f"{FUSED_SEEDS_ENV}: got 'sometimes'"):
        SeedGroup(fusable, data, None, k=2)


def test_progress_of_a_fused_group_follows_its_fused_steps(data: TrainingData) -> None:
    config = TrainConfig(**{**SMALL, "semantic_every": 0, "epochs": 2})  # type: ignore[arg-type]
    group = SeedGroup(config, data, None, k=2, fused=True)
    assert epoch_progress(group) == {"epoch": 1, "done": 0.0}
    run = group.run()
    next(run), next(run)  # epoch 0, then epoch 1 trained for both seeds at once
    assert epoch_progress(group) == {"epoch": 2, "done": 0.0}
    assert [t.epoch for t in group.trainers] == [1, 1]
