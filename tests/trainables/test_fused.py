"""Horizontally fused training (``trainables.fused``): k members trained as one model are
each the same as its lone trial, in float64 on the CPU.

The pieces (encoder forward and gradients, hinge loss, clipping, Adam) are held to the
float64 bound of another reduction order (``REORDERED``) against the existing modules;
an epoch of fused training is held to the lone ``Trainer``'s weights, within
``FUSED_TRAINING`` (the ``Trainer``'s loss is float32 even for float64 weights; see
tests/tolerances.py); whole runs, with evaluation, through a trial's group:
tests/trainables/test_group.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from tests.tolerances import FUSED_TRAINING, REORDERED
from trainables import FusedEncoder, FusedTrainer, check_fusable, fuse
from trainables.config import ConfigError, TrainConfig
from trainables.data import EncodedSplit, TrainingData, epoch_batches
from trainables.families import build_tokenizer
from trainables.fused import MEMBER_FIELDS, SHARED_FIELDS
from trainables.loop import Trainer
from trainables.loss import make_loss
from trainables.model import GroundedEncoder

F64 = REORDERED[torch.float64]
BASE = dict(hidden_size=8, batch_size=8, device="cpu", semantic_every=0, threads=1)
# three members that differ in every way a fused group allows
MEMBERS = (
    dict(margin=0.2, lr_max=3e-3, seed=0),
    dict(margin=0.1, lr_min=1e-5, lr_max=1e-2, seed=1, reduction="mean", clip_caption=0.0),
    dict(margin=0.3, lr_max=5e-3, seed=2, negatives="hardest", clip_image=0.01, cycle_epochs=2),
)


pytestmark = pytest.mark.usefixtures("float64")  # tests/trainables/conftest.py


@pytest.fixture(scope="module")
def data(float64_data: TrainingData) -> TrainingData:
    return float64_data


def configs(**shared: object) -> list[TrainConfig]:
    return [TrainConfig(**{**BASE, **shared, **member}) for member in MEMBERS]  # type: ignore[arg-type]


def assert_f64(actual: torch.Tensor, expected: torch.Tensor, what: str = "") -> None:
    torch.testing.assert_close(actual, expected, rtol=F64.rtol, atol=F64.atol, msg=what or None)


# -- the pieces, to the float64 bound ------------------------------------------------------


def _members(data: TrainingData, cfgs: list[TrainConfig]) -> list[GroundedEncoder]:
    tokenizer = build_tokenizer(cfgs[0], data.train.captions)
    models = []
    for config in cfgs:
        torch.manual_seed(config.seed)
        models.append(GroundedEncoder(config, data.feature_dim, tokenizer))
    return models


def _batches(
    split: EncodedSplit, cfgs: list[TrainConfig], extra: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each member's first batch (its own seed's), ``(k, B, ...)``, padded to the longest
    caption of all of them plus ``extra`` steps."""
    rows = np.stack([epoch_batches(split.num_images, 8, c.seed, 0)[0] for c in cfgs])
    lengths = torch.from_numpy(split.lengths[rows])
    width = int(lengths.max()) + extra
    tokens = np.zeros((*rows.shape, width), dtype=np.int64)
    stored = min(width, split.tokens.shape[1])
    tokens[..., :stored] = split.tokens[rows][..., :stored]
    return torch.from_numpy(split.features[rows // 5]), torch.from_numpy(tokens), lengths


@pytest.mark.parametrize(
    "shape",
    [
        dict(rnn_type="gru", pooling="attention"),
        dict(rnn_type="lstm", pooling="attention"),
        dict(rnn_type="gru", pooling="max"),
        dict(rnn_type="lstm", pooling="max"),
        dict(rnn_type="gru", attention_heads=2),
    ],
    ids=["gru-attention", "lstm-attention", "gru-max", "lstm-max", "gru-2-heads"],
)
def test_the_fused_encoder_embeds_and_differentiates_as_each_member_alone(
    data: TrainingData, shape: dict[str, object]
) -> None:
    """Three members, each on its own batch of variable-length captions: the fused
    embeddings (training path and evaluation path), losses and every gradient are each
    lone model's (``packed_bidirectional`` in training, ``nn.GRU``/``nn.LSTM`` in
    evaluation), and extra padding changes nothing."""
    cfgs = configs(**shape)
    models = _members(data, cfgs)
    fused = FusedEncoder(models)
    features, tokens, lengths = _batches(data.train, cfgs)
    assert len(set(lengths.amax(dim=1).tolist())) > 1  # the members' widths differ
    images, captions = fused(features, tokens, lengths)
    losses = make_loss(cfgs)(images, captions)
    losses.sum().backward()
    for m, (model, config) in enumerate(zip(models, cfgs, strict=True)):
        width = int(lengths[m].max())
        lone_images, lone_captions = model(features[m], tokens[m, :, :width], lengths[m])
        assert_f64(images[m], lone_images, f"member {m} images")
        assert_f64(captions[m], lone_captions, f"member {m} captions")
        lone_loss = make_loss(config)(lone_images, lone_captions)
        assert_f64(losses[m], lone_loss, f"member {m} loss")
        lone_loss.backward()
        for name, p in model.named_parameters():
            grad, lone_grad = fused.param(name).grad, p.grad
            assert grad is not None and lone_grad is not None
            assert_f64(grad[m], lone_grad, f"member {m} gradient of {name}")
    with torch.no_grad():
        padded = fused(*_batches(data.train, cfgs, extra=9))
        for m, model in enumerate(models):
            assert_f64(padded[1][m], captions[m].detach(), f"member {m} with more padding")
            model.eval()
            width = int(lengths[m].max())
            evaluated = model.caption_encoder(tokens[m, :, :width], lengths[m])  # nn.GRU/LSTM
            assert_f64(captions[m].detach(), evaluated, f"member {m} in evaluation")


# -- whole runs, against the lone Trainer ----------------------------------------------------


@pytest.mark.parametrize(
    "shape",
    [dict(rnn_type="gru", pooling="attention"), dict(rnn_type="lstm", pooling="max")],
    ids=["gru-attention", "lstm-max"],
)
@pytest.mark.slow
def test_an_epoch_of_fused_training_is_each_members_lone_training(
    data: TrainingData, shape: dict[str, object]
) -> None:
    """60 fused steps: each member's per-step losses and final weights are its lone
    ``Trainer``'s; a lone trial of another member's config is far off (the check can
    fail)."""
    cfgs = configs(**shape)
    fused = fuse(cfgs, data)
    losses = fused.train_batches(fused.plans(0))
    assert losses.shape == (3, 60)
    lone = []
    for m, config in enumerate(cfgs):
        trainer = Trainer(config, data)
        lone_losses = trainer.train_batches(fused.plans(0)[m])
        torch.testing.assert_close(losses[m], lone_losses, **FUSED_TRAINING._asdict())
        state = fused.member_state(m)
        for name, value in trainer.model.state_dict().items():
            torch.testing.assert_close(
                state[name], value, **FUSED_TRAINING._asdict(), msg=f"member {m}: {name}"
            )
        lone.append(trainer.model.state_dict())
    wrong = fused.member_state(0)["caption_encoder.rnn.weight_hh_l0"]
    for other in lone[1:]:  # other seeds and margins: nowhere near the bound
        assert not torch.allclose(wrong, other["caption_encoder.rnn.weight_hh_l0"], atol=1e-3)
    changed = dataclasses.replace(cfgs[0], margin=0.25)  # the same seed, another margin
    off = Trainer(changed, data)
    off.train_batches(fused.plans(0)[0])
    assert (wrong - off.model.state_dict()["caption_encoder.rnn.weight_hh_l0"]).abs().max() > 1e-4


def test_a_stopped_member_leaves_and_the_others_train_on_unchanged(data: TrainingData) -> None:
    """Early stopping: member 1 leaves after the first epoch; members 0 and 2 go on exactly
    as in the group that kept it (to the float64 bound: the batched products change
    shape), and a member's state loads into an ordinary ``GroundedEncoder``."""
    cfgs = configs()
    kept, stopped = fuse(cfgs, data), fuse(cfgs, data)
    for trainer in (kept, stopped):
        trainer.train_batches(trainer.plans(0)[:, :10])
    stopped.stop(1)
    assert stopped.member_ids == [0, 2]
    with pytest.raises(KeyError, match="member 1 is not in the group"):
        stopped.member_state(1)
    kept.train_batches(kept.plans(1)[:, :10])
    stopped.train_batches(stopped.plans(1)[:, :10])
    for m in (0, 2):
        theirs, ours = kept.member_state(m), stopped.member_state(m)
        for name in theirs:
            assert_f64(ours[name], theirs[name], f"member {m}: {name}")
    model = GroundedEncoder(cfgs[2], data.feature_dim)
    model.load_state_dict(stopped.member_state(2))  # strict: every name and shape
    features, tokens, lengths = _batches(data.val, cfgs)
    with torch.no_grad():
        fused_images, fused_captions = stopped.model(
            features[[0, 2]], tokens[[0, 2]], lengths[[0, 2]]
        )
        width = int(lengths[2].max())
        alone = model.eval()(features[2], tokens[2, :, :width], lengths[2])
    assert_f64(fused_images[1], alone[0])
    assert_f64(fused_captions[1], alone[1])


def test_word_rnn_members_train_as_alone(data: TrainingData) -> None:
    """The word family (its vocabulary built once for the group): 10 fused steps."""
    cfgs = [dataclasses.replace(c, encoder="word_rnn", word_embedding_dim=12) for c in configs()]
    fused = fuse(cfgs, data)
    plans = fused.plans(0)[:, :10]
    losses = fused.train_batches(plans)
    for m, config in enumerate(cfgs):
        trainer = Trainer(config, data)
        torch.testing.assert_close(
            losses[m], trainer.train_batches(plans[m]), **FUSED_TRAINING._asdict()
        )
        state = fused.member_state(m)
        for name, value in trainer.model.state_dict().items():
            torch.testing.assert_close(state[name], value, **FUSED_TRAINING._asdict())


# -- who may be fused ------------------------------------------------------------------------


def test_every_config_field_is_either_shared_or_per_member() -> None:
    assert set(MEMBER_FIELDS) <= set(TrainConfig.field_names())
    assert sorted(MEMBER_FIELDS + SHARED_FIELDS) == sorted(TrainConfig.field_names())
    for shape in ("hidden_size", "rnn_type", "pooling", "encoder", "batch_size", "device"):
        assert shape in SHARED_FIELDS


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (dict(hidden_size=16), "hidden_size"),
        (dict(rnn_type="lstm"), "rnn_type"),
        (dict(pooling="max"), "pooling"),
        (dict(batch_size=16), "batch_size"),
        (dict(attention_hidden=64), "attention_hidden"),
        (dict(precision="bf16"), "precision"),
    ],
)
def test_members_of_other_shapes_are_refused_naming_the_field(
    change: dict[str, object], field: str
) -> None:
    cfgs = configs()
    cfgs[2] = cfgs[2].replace(**change)
    with pytest.raises(ConfigError, match=f"^{field}: differs between fused members") as err:
        check_fusable(cfgs)
    assert err.value.field == field
    assert "member 2" in str(err.value)
    check_fusable(configs())  # the members as they were: fusable


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (dict(encoder="word_bow"), "encoder"),
        (dict(encoder="vete_rnn", hidden_size=8), "encoder"),
        (dict(hidden_size=8, pairing="caption"), "pairing"),
        (dict(hidden_size=8, loss="pearson"), "loss"),
        (dict(hidden_size=8, attention_heads=2, attention_penalty=0.1), "attention_penalty"),
    ],
)
def test_what_the_fused_path_does_not_implement_is_refused(
    config: dict[str, object], field: str
) -> None:
    cfgs = [TrainConfig(**config, device="cpu", seed=seed) for seed in (0, 1)]  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=f"^{field}: ") as err:
        FusedTrainer(cfgs, None)  # type: ignore[arg-type]  # refused before the data are read
    assert err.value.field == field
    with pytest.raises(ValueError, match="at least one member"):
        check_fusable([])
