"""Horizontally fused training (HFTA, Wang et al., MLSys 2021): k models of the same shapes
trained as one, each member's training the same as its own lone ``Trainer``'s. It is the
fused engine of a trial's group (``trainables.group``, ``trainables._fused_group``): it
trains; the members' ``Trainer`` s evaluate.

    trainer = fuse([TrainConfig(margin=m, seed=s, ...) for m, s in ...], data)
    losses = trainer.train_batches(trainer.plans(0))   # one epoch of every member
    trainer.stop(3)                      # member 3 leaves, the rest train on
    state = trainer.member_state(0)      # an ordinary GroundedEncoder state dict

**Who may be fused** (``check_fusable``): configs that agree on every field of
``SHARED_FIELDS``, i.e. everything that shapes the model or the batches (family, sizes,
RNN type, pooling, attention heads, vocabulary, batch size, pairing) and how the run is
set up (device, precision, threads, evaluation batch size); they may differ in the
fields of ``MEMBER_FIELDS``: margin, loss reduction and negatives, learning-rate bounds
and cycle, clipping, seed, epochs, snapshots and the evaluation schedule. Fused here: the
RNN families with pooling (``char_rnn``, ``word_rnn`` with learned embeddings), the
hinge loss, image pairing, no attention penalty; anything else is refused naming the
field.

**Data order.** A lone trial's seed sets both its initialisation and its batch order
(``epoch_batches``). Each member keeps both: it is initialised as its lone trial
(``torch.manual_seed(seed)``, then its model) and sees its own stream of batches; the
fused step stacks the k members' batches (each its own images and captions, padded to
the longest caption of all k) along the member dimension. Members of one seed see the
same batches.

**What is fused** (``trainables._fused_model``, ``trainables._fused_rnn``,
``trainables.optim``): parameters stacked with a leading member dimension; the
embedding lookup, the image encoder, the input projections and the attention as batched
products over members; both directions of every member's recurrence as one batched
recurrence; the hinge loss per member (the sum of the k losses is minimised: the members
share no parameter, so each gets its own gradient); clipping by each member's own
gradient norm; Adam with each member's learning rate from its own cyclic schedule. As
the ``Trainer`` does, the loss is computed in float32 from the embeddings.

**Evaluation** is not part of the fused trainer: after each epoch a member's weights go to
its own ``Trainer`` (``copy_member_to``), which evaluates, keeps snapshots and checkpoints
as a lone run does. A member's training state in the ``Trainer``'s checkpoint format is its
weights, its Adam moments (``member_moments``) and the step count; ``load_member`` and
``resume_at`` put such states back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from trainables import families
from trainables._fused_model import FusedEncoder
from trainables.config import ConfigError, TrainConfig
from trainables.data import TrainingData, device_splits, epoch_batches
from trainables.device import autocast, set_up_training
from trainables.loss import at_least_float32, make_loss
from trainables.model import GroundedEncoder
from trainables.optim import GroupAdam, clip_per_member
from trainables.schedule import cyclic_cosine_lr

__all__ = [
    "FUSED_ENCODERS",
    "MEMBER_FIELDS",
    "SHARED_FIELDS",
    "FusedEncoder",
    "FusedTrainer",
    "check_fusable",
    "fuse",
]

# what may differ between the members of one fused group (the fields that say so:
# trainables.config.setting); every other field is shared
MEMBER_FIELDS = tuple(f.name for f in dataclasses.fields(TrainConfig) if f.metadata["member"])
SHARED_FIELDS = tuple(name for name in TrainConfig.field_names() if name not in MEMBER_FIELDS)
FUSED_ENCODERS = ("char_rnn", "word_rnn")
# what the fused path implements, field by field (each: the only values it takes)
_SUPPORTED = {
    "loss": ("hinge",),
    "pairing": ("image",),
    "word_vectors_update": ("learned",),
}


def check_fusable(configs: Sequence[TrainConfig]) -> None:
    """A ``ConfigError`` (a ``ValueError``) naming the field when ``configs`` cannot be
    trained as one fused group: none given, a family or setting the fused path does not
    implement, or a field of ``SHARED_FIELDS`` that differs between two members."""
    if not configs:
        raise ValueError("configs: expected at least one member config")
    first = configs[0]
    for name in SHARED_FIELDS:
        for member, config in enumerate(configs[1:], start=1):
            if getattr(config, name) != getattr(first, name):
                raise ConfigError(
                    name,
                    f"differs between fused members (member 0: {getattr(first, name)!r}, "
                    f"member {member}: {getattr(config, name)!r}); fused members must share "
                    "their shapes and run settings (trainables.fused.SHARED_FIELDS)",
                )
    if first.encoder not in FUSED_ENCODERS:
        raise ConfigError(
            "encoder",
            f"got {first.encoder!r}; fused training takes {', '.join(FUSED_ENCODERS)}",
        )
    for name, allowed in _SUPPORTED.items():
        if getattr(first, name) not in allowed:
            raise ConfigError(
                name, f"got {getattr(first, name)!r}; fused training takes {', '.join(allowed)}"
            )
    for member, config in enumerate(configs):
        if config.attention_penalty:
            raise ConfigError(
                "attention_penalty",
                f"member {member}: got {config.attention_penalty}; fused training takes 0",
            )


def fuse(configs: Sequence[TrainConfig], data: TrainingData) -> FusedTrainer:
    """The ``FusedTrainer`` of ``configs`` on ``data`` (``check_fusable`` first)."""
    return FusedTrainer(configs, data)


@dataclass
class _Member:
    """One member: its id (its position in the configs it was fused from) and config."""

    id: int
    config: TrainConfig


class FusedTrainer:
    """k members trained as one (module docstring). Members are named by their position
    in ``configs`` (``member id``), also after others have left the group."""

    def __init__(self, configs: Sequence[TrainConfig], data: TrainingData) -> None:
        check_fusable(configs)
        shared = configs[0]
        self.device = set_up_training(shared, data.train.num_images)
        self.shared = shared
        self.members = [_Member(i, config) for i, config in enumerate(configs)]
        self.tokenizer = families.build_tokenizer(shared, data.train.captions)
        pretrained = families.load_pretrained(shared, self.tokenizer)
        models = []
        with torch.random.fork_rng(devices=[]):
            for config in configs:  # each initialised as its lone Trainer initialises it
                torch.manual_seed(config.seed)
                models.append(GroundedEncoder(config, data.feature_dim, self.tokenizer, pretrained))
        self.model = FusedEncoder(models).to(self.device)
        self.optimizer = GroupAdam(self._trainable())
        splits = device_splits(data, self.device, self.tokenizer)
        self.train_split, self.val_split, self.test_split = splits
        self.steps_per_epoch = 5 * (data.train.num_images // shared.batch_size)
        self.epoch = 0  # epochs trained so far
        self.step = 0  # fused steps trained so far
        self.last_lr: dict[int, float] = {}  # each member's learning rate at the last step

    # -- members ------------------------------------------------------------------------

    @property
    def member_ids(self) -> list[int]:
        """The members still in the group, in their order in the stacked parameters."""
        return [m.id for m in self.members]

    def _position(self, member_id: int) -> int:
        for position, member in enumerate(self.members):
            if member.id == member_id:
                return position
        raise KeyError(f"member {member_id} is not in the group (members: {self.member_ids})")

    def member_state(self, member_id: int) -> dict[str, torch.Tensor]:
        """The member's current weights as its ``GroundedEncoder``'s state dict, on the
        CPU: checkpoint or register it as a lone trial's model."""
        state = self.model.member_state(self._position(member_id))
        return {name: value.to("cpu") for name, value in state.items()}

    def copy_member_to(self, member_id: int, model: GroundedEncoder) -> None:
        """Overwrite ``model``'s weights (a ``GroundedEncoder`` of the member's shapes, on
        any device) with the member's current ones, in place."""
        position = self._position(member_id)
        with torch.no_grad():
            for name, tensor in model.state_dict().items():
                tensor.copy_(self.model.param(name)[position])

    def member_moments(self, member_id: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """The member's Adam moments ``(exp_avg, exp_avg_sq)`` by state-dict name of its
        trainable parameters (copies, on the training device); their step count is
        ``optimizer.steps``, every member's."""
        return self.optimizer.moments(self._position(member_id))

    def load_member(
        self,
        member_id: int,
        weights: Mapping[str, torch.Tensor],
        moments: Mapping[str, tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> None:
        """Set the member's weights (its ``GroundedEncoder`` state dict) and its Adam
        moments (``member_moments``' form; None: zero, as before a first step)."""
        position = self._position(member_id)
        missing = set(self.model.names) ^ set(weights)
        if missing:
            raise KeyError(f"member {member_id}: weights differ in {sorted(missing)}")
        with torch.no_grad():
            for name in self.model.names:
                self.model.param(name)[position].copy_(weights[name])
        self.optimizer.load_moments(moments, position)

    def resume_at(self, epoch: int, step: int) -> None:
        """Continue after ``epoch`` epochs and ``step`` steps (a group whose members were
        loaded with ``load_member``): the schedule's and Adam's step count."""
        self.epoch, self.step = epoch, step
        self.optimizer.steps = step

    def stop(self, member_id: int) -> None:
        """The member leaves the group (early stopping, or its last epoch): its weights
        and optimiser state are dropped, the others train on unchanged."""
        gone = self._position(member_id)
        kept = [p for p in range(len(self.members)) if p != gone]
        self.model.keep(kept)
        self.optimizer.keep(self._trainable(), kept)
        del self.members[gone]

    def _trainable(self) -> dict[str, torch.nn.Parameter]:
        """The stacked parameters by state-dict name (Adam trains those that require a
        gradient)."""
        return {name: self.model.param(name) for name in self.model.names}

    # -- training -----------------------------------------------------------------------

    def plans(self, epoch: int) -> np.ndarray:
        """Every member's batch plan of ``epoch``: ``(k, steps, batch_size)`` caption rows,
        member m's as its lone trial's (``epoch_batches`` with its seed)."""
        n, size = self.train_split.num_images, self.shared.batch_size
        return np.stack([epoch_batches(n, size, m.config.seed, epoch) for m in self.members])

    def learning_rates(self) -> torch.Tensor:
        """Each member's learning rate at the current step, from its own cycle."""
        return torch.tensor(
            [
                cyclic_cosine_lr(
                    self.step,
                    self.steps_per_epoch * m.config.cycle_epochs,
                    m.config.lr_min,
                    m.config.lr_max,
                )
                for m in self.members
            ],
            dtype=torch.float64,
        )

    def train_batches(self, plans: np.ndarray) -> torch.Tensor:
        """One fused optimiser step per column of ``plans`` (``(k, steps, batch_size)``,
        as ``plans`` makes them); the ``(k, steps)`` losses, still on the device."""
        if not self.members:
            raise RuntimeError("no members left in the group")
        configs = [m.config for m in self.members]
        loss_fn = make_loss(configs)
        limits = {
            "image": torch.tensor([c.clip_image for c in configs], dtype=torch.float64),
            "caption": torch.tensor([c.clip_caption for c in configs], dtype=torch.float64),
        }
        groups = self.model.groups()
        split = self.train_split
        losses = torch.empty(len(configs), plans.shape[1], device=self.device)
        self.model.train()
        for i in range(plans.shape[1]):
            lr = self.learning_rates()
            rows_cpu = torch.from_numpy(np.ascontiguousarray(plans[:, i]))  # (k, B)
            lengths = split.lengths[rows_cpu]
            rows = rows_cpu.to(self.device)
            tokens = split.tokens[rows, : int(lengths.max())].long()
            with autocast(self.device, self.shared.precision):
                images, captions = self.model(split.features[rows // 5], tokens, lengths)
            loss = loss_fn(at_least_float32(images), at_least_float32(captions))
            self.optimizer.zero_grad()
            loss.sum().backward()
            for side, limit in limits.items():
                if groups[side]:
                    clip_per_member(groups[side], limit)
            self.optimizer.step(lr)
            losses[:, i] = loss.detach()
            self.step += 1
        self.last_lr = {m.id: float(v) for m, v in zip(self.members, lr, strict=True)}
        return losses
