"""A trial's group (``trainables.group.TrialGroup``): its configurations at their seeds,
trained by either engine (``RunConfig.engine``), reporting the same.

- seeds: every metric's mean over the seeds and the headline keys' spread (``combine``);
- fused and sequential give the same reports (float64 on the CPU, within
  ``FUSED_TRAINING``), with the dev semantic score and the test battery on, for the seeds
  of one configuration and for several configurations of one shape;
- a member whose epochs are done, or that ``stop`` takes out, leaves while the others
  train on; a checkpoint keeps who was stopped; a checkpoint written by either engine
  resumes with either, each seat's file a lone ``Trainer``'s; a group of one also
  resumes from the flat layout written before trials were groups;
- the engine's rule, and its progress over every seat."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import statistics
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import cast

import pytest
import torch

from storage.senteval import SemanticBenchmark, load_senteval
from tests.tolerances import FUSED_TRAINING
from trainables import names
from trainables.checkpoint import load_training_state
from trainables.config import ConfigError, TrainConfig
from trainables.data import TrainingData, default_senteval, epoch_batches
from trainables.device import resolve_device
from trainables.group import (
    GROUP_FILE,
    SPREAD_KEYS,
    TrialGroup,
    combine,
    member_folder,
    state_file,
)
from trainables.loop import Trainer

# batch 32: 15 steps an epoch on the tiny world's 96 training images, not batch 8's 60; the
# same comparisons, this module's CPU time about two thirds of what it was
SMALL = dict(
    hidden_size=8,
    batch_size=32,
    epochs=3,
    snapshot_interval=1,
    ensemble_size=2,
    lr_max=3e-3,
    device="cpu",
    semantic_every=1,
    threads=1,
    seed=5,
)
QUIET = {**SMALL, "semantic_every": 0}  # no semantic evaluation: the fastest group
# two configurations of one shape: their own margin, learning rate, seed and epochs
CONFIGS = [
    TrainConfig(**QUIET | {"epochs": 2, "margin": 0.2, "lr_max": 3e-3, "seed": 5}),  # type: ignore[arg-type]
    TrainConfig(**QUIET | {"margin": 0.35, "lr_max": 2e-3, "seed": 9}),  # type: ignore[arg-type]
]
R, T = names.BEST_RETRIEVAL, names.TRAIN_SECONDS
CPU = torch.device("cpu")


def _config(engine: str = "auto", **changes: object) -> TrainConfig:
    return TrainConfig(**{**SMALL, "engine": engine, **changes})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def bench(tiny_world: Path) -> SemanticBenchmark:
    senteval = default_senteval(str(tiny_world))
    assert senteval is not None
    return load_senteval(senteval)


@contextlib.contextmanager
def _float64() -> Iterator[None]:
    """Models built in float64, for a module's fixture (``float64`` is a test's)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def _seeded(engine: str, data: TrainingData, bench: SemanticBenchmark) -> TrialGroup:
    """One configuration at two seeds, the dev semantic score every epoch, and the test
    battery in epoch 1's own report (``complete_at``); in the next one's elsewhere."""
    return TrialGroup([_config(engine)], data, bench, 2, complete_at={1})


@dataclasses.dataclass
class Seeded:
    """A group of ``_seeded`` run to its end, checkpointed into ``folder`` after epoch 2
    as the trainable checkpoints every epoch (the group trains on after it): while epoch
    2's test battery still runs, so the checkpoint lacks it."""

    group: TrialGroup
    reports: list[dict[str, float]]
    folder: Path


@pytest.fixture(scope="module")
def seeded(
    float64_data: TrainingData, bench: SemanticBenchmark, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Seeded]:
    """``_seeded`` by either engine, in float64: what the two engines report, and the
    checkpoints that resume with either (one run for the tests of both)."""
    out = {}
    with _float64():
        for engine in ("fused", "sequential"):
            group, folder = _seeded(engine, float64_data, bench), tmp_path_factory.mktemp(engine)
            run = group.run()
            reports = [next(run)[0] for _ in range(3)]
            group.save(folder)
            out[engine] = Seeded(group, [*reports, *(r[0] for r in run)], folder)
    return out


@pytest.fixture(scope="module")
def lone(float64_data: TrainingData) -> list[list[dict[str, float]]]:
    """The reports of each of ``CONFIGS`` trained alone (a ``Trainer``), in float64."""
    with _float64():
        return [list(Trainer(config, float64_data, None).run()) for config in CONFIGS]


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


def _by_member(group: TrialGroup) -> dict[int, list[dict[str, float]]]:
    out: dict[int, list[dict[str, float]]] = {}
    for reports in group.run():
        for member, report in reports.items():
            out.setdefault(member, []).append(report)
    return out


def _checkpoint_at(group: TrialGroup, epoch: int, folder: Path) -> list[dict[int, dict]]:
    """Run ``group`` to its report of ``epoch`` and checkpoint it, as the trainable does."""
    run = cast(Generator[dict[int, dict[str, float]], None, None], group.run())
    reports = [next(run) for _ in range(epoch + 1)]
    group.save(folder)
    run.close()
    return reports


# -- seeds: the mean and the spread ---------------------------------------------------


def test_combine_means_sums_time_and_keeps_the_first_seeds_ensemble() -> None:
    a = {"epoch": 2.0, R: 40.0, T: 3.0, "train/loss": 0.5, "ensemble/size": 2.0,
         "ensemble/epoch_1": 2.0, "only_a": 1.0}  # fmt: skip
    b = {"epoch": 2.0, R: 50.0, T: 4.0, "train/loss": 0.7, "ensemble/size": 2.0,
         "ensemble/epoch_1": 1.0}  # fmt: skip
    c = {"epoch": 2.0, R: 60.0, T: 5.0, "train/loss": 0.9, "ensemble/size": 2.0,
         "ensemble/epoch_1": 1.0}  # fmt: skip
    out = combine([a, b, c])
    assert out[R] == pytest.approx(50.0) and out["train/loss"] == pytest.approx(0.7)
    assert out[names.spread(R)] == pytest.approx(10.0)  # the sample standard deviation
    assert out[T] == pytest.approx(12.0)  # the trial's cost: every seed's training
    assert out["ensemble/epoch_1"] == 2.0  # the first seed's ensemble, never an average
    assert "only_a" not in out  # no mean of one seed's value
    assert names.spread("train/loss") not in out  # spread only for the headline keys
    assert names.spread(R) in {names.spread(k) for k in SPREAD_KEYS}


def test_combine_of_one_is_the_report_itself_and_mismatched_epochs_are_refused() -> None:
    one = {"epoch": 1.0, R: 42.0, T: 2.0}
    assert combine([one]) == one and names.spread(R) not in combine([one])
    with pytest.raises(ValueError, match="epochs differ"):
        combine([{"epoch": 1.0, R: 1.0}, {"epoch": 2.0, R: 1.0}])
    nan = combine([{"epoch": 1.0, R: math.nan}, {"epoch": 1.0, R: 3.0}])
    assert math.isnan(nan[R]) and names.spread(R) not in nan


def test_a_member_at_two_seeds_reports_the_mean_of_trainers_at_consecutive_seeds(
    tiny_world: Path,
) -> None:
    data = TrainingData.from_store(str(tiny_world))
    config = TrainConfig(**QUIET | {"epochs": 2})  # type: ignore[arg-type]
    group = [r[0] for r in TrialGroup([config], data, None, seeds=2).run()]  # a CPU: sequential
    alone = [list(Trainer(dataclasses.replace(config, seed=seed), data).run()) for seed in (5, 6)]
    assert len(group) == 3
    for epoch, report in enumerate(group):
        first, second = alone[0][epoch], alone[1][epoch]
        assert report["epoch"] == epoch
        for key in (names.PRIMARY_RETRIEVAL, R, names.key(names.TEST, "r10_mean")):
            assert report[key] == pytest.approx((first[key] + second[key]) / 2)
            assert report[names.spread(key)] == pytest.approx(
                statistics.stdev([first[key], second[key]])
            )
    assert alone[0][-1][R] != alone[1][-1][R]  # the seeds differ, so the mean says more
    assert group[-1][names.FINISHED] == pytest.approx(
        (alone[0][-1][names.FINISHED] + alone[1][-1][names.FINISHED]) / 2
    )
    # a group of one at one seed: exactly a Trainer's reports
    single = [r[0] for r in TrialGroup([config], data, None).run()]
    assert [r[R] for r in single] == [r[R] for r in alone[0]]
    with pytest.raises(ValueError, match="at 0 seeds"):
        TrialGroup([config], data, None, seeds=0)
    with pytest.raises(ValueError, match="got 0 configs"):
        TrialGroup([], data, None)


# -- the two engines report the same ----------------------------------------------------


@pytest.mark.slow  # its fixture runs both engines
def test_fused_seeds_report_what_seeds_one_after_the_other_report(
    seeded: dict[str, Seeded],
) -> None:
    fused, alone = seeded["fused"].group, seeded["sequential"].group
    assert fused.fused and not alone.fused
    reports, expected = seeded["fused"].reports, seeded["sequential"].reports
    assert_same_reports(reports, expected)
    final, battery = reports[-1], names.key(names.TEST, "semantic")
    assert names.PRIMARY_SEMANTIC in reports[0] and battery in reports[1]  # complete_at
    assert battery not in reports[2] and names.late(battery) in reports[3]  # elsewhere
    assert names.key(names.ENSEMBLE, "semantic") in final and names.spread(battery) in final
    assert final[names.spread(names.BEST_RETRIEVAL)] > 0  # two seeds, two models
    for mine, theirs in zip(fused.trainers, alone.trainers, strict=True):
        assert_same_reports(mine.history, theirs.history)  # each seed's own, battery filed
        mine_kept, theirs_kept = mine.ensemble.snapshots, theirs.ensemble.snapshots
        assert [s.epoch for s in mine_kept] == [s.epoch for s in theirs_kept]
        for key, value in theirs.model.state_dict().items():
            torch.testing.assert_close(
                mine.model.state_dict()[key], value, rtol=FUSED_TRAINING.rtol,
                atol=FUSED_TRAINING.atol,
            )  # fmt: skip
    assert reports[1][names.TRAIN_SECONDS] > 0  # the fused epochs' cost, shared out


@pytest.mark.slow
@pytest.mark.usefixtures("float64")  # tests/trainables/conftest.py
def test_fused_members_report_what_they_report_alone_and_leave_at_their_own_end(
    float64_data: TrainingData, lone: list[list[dict[str, float]]]
) -> None:
    group = TrialGroup(CONFIGS, float64_data, None)  # several configurations: auto fuses
    assert group.fused
    reports = _by_member(group)
    for member in range(len(CONFIGS)):
        assert_same_reports(reports[member], lone[member])
    assert [len(reports[0]), len(reports[1])] == [3, 4]  # epochs 0..2 and 0..3
    assert group.running == set() and group.stopped == set()


# -- stops and checkpoints ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.usefixtures("float64")
def test_a_stopped_member_leaves_the_others_train_on_and_a_checkpoint_keeps_it_stopped(
    float64_data: TrainingData, lone: list[list[dict[str, float]]], tmp_path: Path
) -> None:
    """Member 1 reports what it reports alone (as in a group nobody left: the test
    above) while member 0, stopped after epoch 1, is out; and so on from the checkpoint."""
    both = [dataclasses.replace(c, epochs=3) for c in CONFIGS]
    assert both[1] == CONFIGS[1]  # member 1 as trained alone
    group = TrialGroup(both, float64_data, None)
    run = cast(Generator[dict[int, dict[str, float]], None, None], group.run())
    head = [next(run), next(run)]  # epochs 0 and 1 of both
    group.stop(0)  # as the trainable does when the driver's searcher says so
    group.save(tmp_path)
    seen = head + list(run)
    assert [sorted(r) for r in seen] == [[0, 1], [0, 1], [1], [1]]
    assert group.stopped == {0} and len(group.trainers[0].history) == 2
    assert group._fused is not None and group._fused.fused.member_ids == []
    assert_same_reports([r[1] for r in seen], lone[1])
    # the checkpoint: each member's folder, each seat a lone Trainer's file, who stopped
    assert json.loads((tmp_path / GROUP_FILE).read_text()) == {"stopped": [0]}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [GROUP_FILE, member_folder(tmp_path, 0).name, member_folder(tmp_path, 1).name]
    )
    assert (member_folder(tmp_path, 0) / state_file(0)).is_file()
    for engine in ("fused", "sequential"):  # resumed by either engine: only member 1 trains
        resumed = TrialGroup([c.replace(engine=engine) for c in both], float64_data, None)
        resumed.load(tmp_path)
        assert resumed.stopped == {0} and resumed.running == {1}
        rest = list(resumed.run())
        assert [sorted(r) for r in rest] == [[1], [1]]
        assert_same_reports([r[1] for r in head + rest], lone[1])


@pytest.mark.slow
@pytest.mark.usefixtures("float64")
def test_a_checkpoint_of_either_engine_resumes_with_either(
    seeded: dict[str, Seeded], float64_data: TrainingData, bench: SemanticBenchmark,
    tmp_path: Path,
) -> None:  # fmt: skip
    """The checkpoints of ``seeded`` (after epoch 2 of 3), each resumed by either engine,
    go on as the fused run went on."""
    whole = seeded["fused"].reports
    fused_dir, alone_dir = seeded["fused"].folder, seeded["sequential"].folder
    place = member_folder(fused_dir, 0)
    assert sorted(p.name for p in place.iterdir()) == sorted([state_file(0), state_file(1)])
    # each seed's file is a lone Trainer's checkpoint: the same state, Adam's included
    for i in range(2):
        mine = load_training_state(place / state_file(i), CPU)
        theirs = load_training_state(member_folder(alone_dir, 0) / state_file(i), CPU)
        assert (mine["epoch"], mine["step"]) == (theirs["epoch"], theirs["step"])
        assert mine["epoch"] == 2
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
    for engine in ("fused", "sequential"):  # a fused checkpoint resumes either way
        resumed = _seeded(engine, float64_data, bench)
        resumed.load(fused_dir)
        rest = [r[0] for r in resumed.run()]
        assert [r["epoch"] for r in rest] == [3.0]
        assert_same_reports(rest, whole[3:])  # epoch 2's battery, not in it, comes again
    resumed = _seeded("fused", float64_data, bench)  # a sequential one fused
    resumed.load(alone_dir)
    assert_same_reports([r[0] for r in resumed.run()], whole[3:])
    # the layout written before trials were groups: a group of one's seats at the top
    flat = tmp_path / "flat"
    flat.mkdir()
    for i in range(2):
        (flat / state_file(i)).write_bytes((place / state_file(i)).read_bytes())
    resumed = _seeded("fused", float64_data, bench)
    resumed.load(flat)
    assert [r[0]["epoch"] for r in resumed.run()] == [3.0]


# -- the engine's rule, the progress -----------------------------------------------------


def test_the_engine_fuses_where_it_pays_or_is_asked_and_says_why_not(
    tiny_world: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = TrainingData.from_store(str(tiny_world))
    quiet = {"semantic_every": 0, "epochs": 1}
    pearson = _config("auto", loss="pearson", **quiet)
    on_gpu = resolve_device(pearson.device).type == "cuda"
    with caplog.at_level(logging.WARNING, logger="trainables.group"):
        group = TrialGroup([pearson], data, None, 2)
    assert not group.fused
    said = [r.getMessage() for r in caplog.records if "one after the other" in r.getMessage()]
    if on_gpu:  # where auto would fuse: says why not
        (message,) = said
        assert "loss" in message and "pearson" in message
    else:  # a CPU trains seeds one after the other anyway: nothing to explain
        assert said == []
    assert len(list(group.run())) == 2
    with pytest.raises(ConfigError, match="loss"):  # "fused" insists
        TrialGroup([_config("fused", loss="pearson", **quiet)], data, None, 2)
    assert not TrialGroup([_config("sequential", **quiet)], data, None, 2).fused
    assert TrialGroup([_config("auto", **quiet)], data, None, 2).fused == on_gpu
    assert not TrialGroup([_config("fused", **quiet)], data, None).fused  # one seat: alone
    assert TrialGroup(CONFIGS, data, None).fused  # several configurations: fused anywhere
    with pytest.raises(ConfigError, match="hidden_size"):  # of two shapes, fusing insisted
        other = CONFIGS[1].replace(hidden_size=16, engine="fused")
        TrialGroup([CONFIGS[0].replace(engine="fused"), other], data, None)
    with pytest.raises(ConfigError, match="engine: got 'sometimes'"):
        _config("sometimes")


def test_progress_follows_the_steps_of_every_seat(tiny_world: Path) -> None:
    data = TrainingData.from_store(tiny_world)
    group = TrialGroup([_config("sequential", semantic_every=0, epochs=2)], data, None, 2)
    assert group.progress() == (1, 0.0)
    first, second = group.trainers
    plan = epoch_batches(data.train.num_images, SMALL["batch_size"], 5, 0)
    assert len(plan) == first.steps_per_epoch
    first.train_batches(plan[: len(plan) // 2])  # half of one seed's epoch: a quarter
    assert group.progress()[1] == pytest.approx((len(plan) // 2) / (2 * len(plan)))
    first.train_batches(plan[len(plan) // 2 :])
    first.epoch += 1  # as train_one_epoch ends; the second seed has not started
    assert group.progress() == (1, 0.5)
    second.train_one_epoch()
    assert group.progress() == (2, 0.0)
    fused = TrialGroup([_config("fused", semantic_every=0, epochs=2)], data, None, 2)
    run = fused.run()
    next(run), next(run)  # epoch 0, then epoch 1 trained for both seeds at once
    assert fused.progress() == (2, 0.0) and [t.epoch for t in fused.trainers] == [1, 1]
