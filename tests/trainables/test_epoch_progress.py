"""The trainable's within-epoch progress (its side channel for the search's display): the
epoch being trained and the share of its steps done, over every seed of a group."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainables.config import TrainConfig
from trainables.data import TrainingData, epoch_batches
from trainables.seeds import SeedGroup
from trainables.tune import epoch_progress

SMALL = {"hidden_size": 8, "batch_size": 8, "epochs": 2, "device": "cpu", "semantic_every": 0,
         "threads": 1}  # fmt: skip


def test_progress_follows_the_steps_of_every_seed(tiny_world: Path) -> None:
    data = TrainingData.from_store(tiny_world)
    group = SeedGroup(TrainConfig.from_dict(SMALL), data, None, k=2, fused=False)
    assert epoch_progress(group) == {"epoch": 1, "done": 0.0}
    first, second = group.trainers
    plan = epoch_batches(data.train.num_images, 8, 0, 0)
    assert len(plan) == first.steps_per_epoch
    first.train_batches(plan[: len(plan) // 2])  # half of one seed's epoch: a quarter
    assert epoch_progress(group)["done"] == pytest.approx((len(plan) // 2) / (2 * len(plan)))
    first.train_batches(plan[len(plan) // 2 :])
    first.epoch += 1  # as train_one_epoch ends; the second seed has not started
    assert epoch_progress(group) == {"epoch": 1, "done": 0.5}
    second.train_one_epoch()
    assert epoch_progress(group) == {"epoch": 2, "done": 0.0}
