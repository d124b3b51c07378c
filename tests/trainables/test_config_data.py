"""The typed config's boundary, and the paper's batching."""

from __future__ import annotations

import numpy as np
import pytest

from trainables.config import TrainConfig
from trainables.data import epoch_batches


def test_defaults_are_the_papers() -> None:
    config = TrainConfig()
    assert (config.hidden_size, config.rnn_type, config.pooling, config.margin) == (
        1024,
        "gru",
        "attention",
        0.2,
    )
    assert (config.epochs, config.snapshot_interval, config.ensemble_size, config.batch_size) == (
        32,
        4,
        2,
        32,
    )
    assert (config.lr_min, config.lr_max, config.embedding_dim) == (1e-6, 1e-3, 2048)


def test_from_dict_converts_and_round_trips() -> None:
    config = TrainConfig.from_dict({"hidden_size": "64", "margin": "0.3", "epochs": 4.0})
    assert (config.hidden_size, config.margin, config.epochs) == (64, 0.3, 4)
    assert TrainConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"hiden_size": 64}, r"unknown config key\(s\) 'hiden_size'; allowed: hidden_size"),
        ({"rnn_type": "rnn"}, r"rnn_type: got 'rnn', expected one of gru, lstm"),
        ({"pooling": "mean"}, r"pooling: got 'mean', expected one of attention, max"),
        ({"margin": -0.1}, r"margin: got -0.1, expected a finite number >= 0.0"),
        ({"hidden_size": 1.5}, r"hidden_size: got 1.5 \(float\), expected int"),
        ({"lr_max": "fast"}, r"lr_max: got 'fast' \(str\), expected float"),
        ({"lr_min": 1e-2}, r"lr_min \(0.01\) must not exceed lr_max \(0.001\)"),
        ({"batch_size": 1}, r"batch_size: got 1, expected at least 2"),
        ({"device": "tpu"}, r"device: got 'tpu'"),
        ({"lr_max": float("nan")}, r"lr_max: got nan"),
    ],
)
def test_invalid_values_name_key_value_and_what_is_allowed(values: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_dict(values)


def test_batches_pair_every_image_with_each_caption_once_per_epoch() -> None:
    plan = epoch_batches(num_images=10, batch_size=3, seed=0, epoch=0)
    assert plan.shape == (5 * 3, 3)  # 3 full batches per pass (last short batch dropped)
    images = plan // 5
    for batch in images:
        assert len(set(batch.tolist())) == 3  # no image twice in a batch
    for k in range(5):  # pass k uses caption k of the same shuffled images
        assert set((plan[3 * k : 3 * k + 3] % 5).ravel().tolist()) == {k}
        np.testing.assert_array_equal(images[3 * k : 3 * k + 3], images[:3])
    used = set(images.ravel().tolist())
    assert len(used) == 9  # one image left out: the short batch was dropped


def test_batches_are_seeded_per_epoch() -> None:
    a = epoch_batches(100, 8, seed=1, epoch=3)
    np.testing.assert_array_equal(a, epoch_batches(100, 8, seed=1, epoch=3))
    assert not np.array_equal(a, epoch_batches(100, 8, seed=1, epoch=4))
    assert not np.array_equal(a, epoch_batches(100, 8, seed=2, epoch=3))
