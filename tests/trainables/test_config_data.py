"""The typed config's boundary, and the paper's batching."""

from __future__ import annotations

import numpy as np
import pytest

from trainables.config import ConfigError, TrainConfig
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
        ({"seed": -1}, r"seed: got -1, expected an integer from 0 to 2\*\*63 - 1"),
        ({"seed": 2**63}, r"seed: got 9223372036854775808, expected an integer from 0"),
        ({"epochs": "1e30"}, r"epochs: got 1000000000000000019884624838656, expected an int"),
        ({"threads": 4096}, r"threads: got 4096, expected an integer from 0 to 1024"),
        ({"hidden_size": True}, r"hidden_size: got True \(bool\), expected int"),
    ],
)
def test_invalid_values_name_key_value_and_what_is_allowed(values: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_dict(values)


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:0", "cuda:7", "cuda:127"])
def test_devices_a_run_may_ask_for(device: str) -> None:
    assert TrainConfig(device=device).device == device


@pytest.mark.parametrize(
    "device", ["", "gpu", "CPU", "cuda:", "cuda:-1", "cuda:abc", "cuda:01", "cuda:128",
               "cuda:1.5", "cpu:0", "mps", " cuda", "cuda:99999999999999999999"],
)  # fmt: skip
def test_devices_torch_would_refuse_or_misread_are_refused(device: str) -> None:
    with pytest.raises(ConfigError, match="expected auto, cpu, cuda or cuda:N") as caught:
        TrainConfig.from_dict({"device": device})
    assert caught.value.field == "device"


def test_integers_are_read_exactly_and_fields_are_typed() -> None:
    assert TrainConfig.from_dict({"seed": "9007199254740993"}).seed == 2**53 + 1  # no float
    assert TrainConfig.from_dict({"seed": np.int64(2**60 + 1)}).seed == 2**60 + 1
    assert TrainConfig.from_dict({"epochs": "1e3"}).epochs == 1000
    with pytest.raises(ConfigError, match=r"hidden_size: got '8' \(str\), expected int"):
        TrainConfig(hidden_size="8")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"margin: got None \(NoneType\), expected float"):
        TrainConfig(margin=None)  # type: ignore[arg-type]
    assert TrainConfig(margin=1).margin == 1  # an int is a float


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
