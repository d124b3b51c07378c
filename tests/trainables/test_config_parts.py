"""The training config is five concerns composed: each declares its own fields, every
field one ``setting`` with its default, help text, bounds and whether fused members may
differ in it; the training config holds them all, flat, and the rules between two."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest
import torch

from trainables.config import (
    CHOICES,
    ConfigError,
    EvalConfig,
    LossConfig,
    ModelConfig,
    OptimConfig,
    RunConfig,
    TrainConfig,
    inherited,
    pinned,
)
from trainables.loss import HingeLoss, PearsonLoss, make_loss
from trainables.model import GroundedEncoder

PARTS = (ModelConfig, LossConfig, OptimConfig, EvalConfig, RunConfig)


def test_the_parts_partition_the_training_config_in_order() -> None:
    names = [name for part in PARTS for name in part.field_names()]
    assert len(names) == len(set(names)), "a field belongs to one concern only"
    assert tuple(names) == TrainConfig.field_names()
    for part in PARTS:  # each field's default is stated once, in its concern
        for field in dataclasses.fields(part):
            assert getattr(TrainConfig(), field.name) == field.default


def _part(config: TrainConfig, kind: type[ModelConfig]) -> ModelConfig:
    return kind.from_dict({name: getattr(config, name) for name in kind.field_names()})


def test_each_part_alone_is_the_training_configs_values() -> None:
    config = TrainConfig(hidden_size=16, margin=0.3, lr_max=0.01, semantic_every=2, seed=7)
    for kind in PARTS:
        assert isinstance(config, kind)  # a component that takes the part takes the whole
        part = _part(config, kind)  # type: ignore[arg-type]
        assert part.to_dict() == {name: getattr(config, name) for name in kind.field_names()}
    assert type(config.run) is RunConfig and type(config.evaluation) is EvalConfig
    assert config.run.seed == 7 and config.evaluation.semantic_every == 2


def test_every_field_declares_its_help_and_its_bounds_are_checked() -> None:
    for field in dataclasses.fields(TrainConfig):
        assert len(field.metadata["help"]) > 10, field.name  # what --help says of it
    bounded = {
        f.name: f.metadata for f in dataclasses.fields(TrainConfig) if f.metadata["low"] is not None
    }
    assert {"hidden_size", "margin", "lr_max", "epochs", "threads", "seed"} <= set(bounded)
    for name, meta in bounded.items():
        below = meta["low"] - 1 if isinstance(getattr(TrainConfig(), name), int) else -1.0
        with pytest.raises(ConfigError) as caught:
            TrainConfig.from_dict({name: below})
        assert caught.value.field == name
    with pytest.raises(ConfigError, match=r"batch_size: got 1, expected at least 2 \(in-batch"):
        TrainConfig(batch_size=1)
    with pytest.raises(ConfigError, match=r"lr_max: got 0\.0, expected a finite number > 0\.0"):
        TrainConfig(lr_max=0.0)
    with pytest.raises(ConfigError, match="threads: got 1025, expected an integer from 0 to 1024"):
        TrainConfig(threads=1025)


@pytest.mark.parametrize(
    ("part", "values", "field"),
    [
        (ModelConfig, {"pooling": "max", "attention_heads": 2}, "attention_heads"),
        (ModelConfig, {"encoder": "word_bow", "hidden_size": 8}, "hidden_size"),
        (ModelConfig, {"rnn_type": "rnn"}, "rnn_type"),
        (ModelConfig, {"dropout": 1.0, "encoder": "cap2img"}, "dropout"),
        (LossConfig, {"margin": -0.1}, "margin"),
        (LossConfig, {"negatives": "some"}, "negatives"),
        (OptimConfig, {"lr_min": 0.1, "lr_max": 0.01}, "lr_min"),
        (OptimConfig, {"batch_size": 1}, "batch_size"),
        (EvalConfig, {"stsb_encoding": "raw"}, "stsb_encoding"),
        (EvalConfig, {"semantic_every": -1}, "semantic_every"),
        (RunConfig, {"device": "gpu"}, "device"),
        (RunConfig, {"threads": 100_000}, "threads"),
    ],
)
def test_each_part_checks_its_own_fields_when_built(
    part: type[ModelConfig], values: dict[str, object], field: str
) -> None:
    for build in (lambda: part.from_dict(values), lambda: TrainConfig.from_dict(values)):
        with pytest.raises(ConfigError) as caught:
            build()
        assert caught.value.field == field


def test_a_part_refuses_the_fields_of_another() -> None:
    with pytest.raises(ConfigError, match=r"unknown config key.*'margin'"):
        ModelConfig.from_dict({"margin": 0.3})
    with pytest.raises(TypeError):
        RunConfig(hidden_size=8)  # type: ignore[call-arg]


def test_the_rules_between_concerns_are_the_training_configs() -> None:
    # the penalty is the loss's weight, but only an attention model with heads has one
    assert LossConfig(attention_penalty=0.5).attention_penalty == 0.5
    with pytest.raises(ConfigError, match="attention_heads 1"):
        TrainConfig(attention_penalty=0.5)
    with pytest.raises(ConfigError, match="does not apply to encoder word_bow"):
        TrainConfig(encoder="word_bow", attention_penalty=0.5)
    # the image clip is the optimiser's, but cap2img's image side has no parameters
    assert OptimConfig(clip_image=0.1).clip_image == 0.1
    with pytest.raises(ConfigError, match="clip_image: does not apply to encoder cap2img"):
        TrainConfig(encoder="cap2img", clip_image=0.1)


def test_choices_are_read_off_the_literal_types() -> None:
    hints = typing.get_type_hints(TrainConfig)
    literal = {n for n, h in hints.items() if typing.get_origin(h) is typing.Literal}
    assert set(CHOICES) == literal
    assert CHOICES["rnn_type"] == ("gru", "lstm")
    assert CHOICES["encoder"][0] == TrainConfig.encoder


def test_components_take_their_concern_alone() -> None:
    torch.manual_seed(0)
    whole = TrainConfig(hidden_size=8, attention_hidden=4)
    alone = GroundedEncoder(_part(whole, ModelConfig), feature_dim=12)
    torch.manual_seed(0)
    composed = GroundedEncoder(whole, feature_dim=12)
    assert alone.embedding_dim == composed.embedding_dim == 16
    for (name, a), (_, b) in zip(
        alone.state_dict().items(), composed.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    hinge = make_loss(LossConfig(margin=0.3, negatives="hardest"))
    assert isinstance(hinge, HingeLoss)
    assert isinstance(make_loss(LossConfig(loss="pearson")), PearsonLoss)


def test_the_hinge_loss_takes_its_member_fields_from_the_loss_config() -> None:
    """``HingeLoss``'s arguments are ``LossConfig``'s fields of the same names, each one
    a member of a fused group may set for itself; a group is refused a loss it cannot
    train per member."""
    fields = {f.name: f for f in dataclasses.fields(LossConfig)}
    assert set(inspect.signature(HingeLoss).parameters) == {"margin", "reduction", "negatives"}
    assert all(fields[name].metadata["member"] for name in inspect.signature(HingeLoss).parameters)
    group = make_loss([LossConfig(margin=0.1), LossConfig(margin=0.3, reduction="mean")])
    assert group.margin.tolist() == [0.1, 0.3] and group.mean.tolist() == [False, True]
    assert make_loss([LossConfig()]).margin.shape == (1,)  # a group of one keeps its axis
    with pytest.raises(ValueError, match="hinge loss only"):
        make_loss([LossConfig(), LossConfig(loss="pearson")])


def test_a_trial_inherits_the_run_level_settings_its_family_has() -> None:
    run_level = {"hidden_size": 32, "lr_max": 0.016, "epochs": 4}
    # the run's size and the rate chosen for it go together
    assert inherited(run_level, {"margin": 0.3}) == run_level
    # a trial that sets its size without a rate takes the paper's, not the run's
    assert inherited(run_level, {"hidden_size": 1024}) == {"hidden_size": 32, "epochs": 4}
    assert inherited(run_level, {"hidden_size": 1024, "lr_max": 1e-4})["lr_max"] == 0.016
    # a family without a hidden size does not get one
    assert inherited(run_level, {"encoder": "word_bow"}) == {"lr_max": 0.016, "epochs": 4}


def test_a_pinned_preset_keeps_its_size_and_rate() -> None:
    assert pinned({"encoder": "vete_rnn"}) == {
        "encoder": "vete_rnn",
        "hidden_size": TrainConfig.hidden_size,
        "lr_max": TrainConfig.lr_max,
    }
    assert pinned({"encoder": "word_bow", "lr_max": 0.1}) == {"encoder": "word_bow", "lr_max": 0.1}
    assert pinned({"hidden_size": 64}) == {"hidden_size": 64, "lr_max": TrainConfig.lr_max}
