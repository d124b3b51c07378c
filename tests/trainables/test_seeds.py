"""A configuration trained at several seeds: the mean and spread of real trainers."""

from __future__ import annotations

import dataclasses
import math
import statistics
from pathlib import Path

import pytest

from tests.trainables.test_loop import SMALL as LOOP_SMALL
from trainables import names
from trainables.config import TrainConfig
from trainables.data import TrainingData
from trainables.loop import Trainer
from trainables.seeds import SPREAD_KEYS, SeedGroup, combine, state_file

SMALL = {**LOOP_SMALL, "epochs": 2, "seed": 5}  # the loop tests' tiny model
R, T = names.BEST_RETRIEVAL, names.TRAIN_SECONDS


@pytest.fixture(scope="module")
def data(tiny_world: Path) -> TrainingData:
    return TrainingData.from_store(str(tiny_world))


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


def test_group_reports_the_mean_of_trainers_at_consecutive_seeds(data: TrainingData) -> None:
    config = TrainConfig(**SMALL)
    group = list(SeedGroup(config, data, None, k=2, fused=False).run())  # fused: float64 tests
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
    # one seed: exactly a Trainer's reports
    single = list(SeedGroup(config, data, None, k=1).run())
    assert [r[R] for r in single] == [r[R] for r in alone[0]]


def test_group_resumes_every_seed_from_its_checkpoint(data: TrainingData, tmp_path: Path) -> None:
    config = TrainConfig(**SMALL)
    whole = list(SeedGroup(config, data, None, k=2).run())
    first = SeedGroup(config, data, None, k=2)
    run = first.run()
    next(run), next(run)  # epochs 0 and 1
    first.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([state_file(0), state_file(1)])
    resumed = SeedGroup(config, data, None, k=2)
    resumed.load(tmp_path)
    rest = list(resumed.run())
    assert [r["epoch"] for r in rest] == [2.0]
    assert rest[0][R] == whole[-1][R] and rest[0][names.FINISHED] == whole[-1][names.FINISHED]


def test_group_refuses_no_seeds(data: TrainingData) -> None:
    with pytest.raises(ValueError, match="expected at least 1"):
        SeedGroup(TrainConfig(**SMALL), data, None, k=0)
