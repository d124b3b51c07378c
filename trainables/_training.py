"""Training one model alone, epoch by epoch: one optimiser step per minibatch of the
epoch's plan (``trainables.data.epoch_batches``), the losses kept on the device until
the epoch ends, then checked and averaged.

    steps = train_steps(trainer, plan)      # ``trainer``: a ``Trainee`` (the Trainer)
    metrics = epoch_metrics(trainer, steps, captions, started)

On a GPU the data live on the device and a step never waits for the host: the batch
plan of an epoch is uploaded once, losses stay on the device until the epoch ends, and
the lengths that packing needs are read from a host copy. The fused engine
(``trainables.fused``) trains k models as one; its members' losses are checked here too
(``check_finite``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from trainables import names
from trainables.config import TrainConfig
from trainables.data import DeviceSplit, partner_rows
from trainables.device import autocast
from trainables.loss import at_least_float32
from trainables.model import GroundedEncoder
from trainables.optim import GroupAdam
from trainables.schedule import cyclic_cosine_lr

__all__ = [
    "NonFiniteLossError",
    "Steps",
    "Trainee",
    "check_finite",
    "epoch_metrics",
    "train_steps",
]


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; the message names the epoch and step."""


class Trainee(Protocol):
    """What training reads and advances (``trainables.loop.Trainer`` is one): the model
    and its optimiser, the loss, the training split, and where the run stands (``step``
    counts minibatches and moves while an epoch trains: a trial's progress reads it)."""

    config: TrainConfig
    device: torch.device
    model: GroundedEncoder
    optimizer: GroupAdam
    loss_fn: torch.nn.Module
    train_split: DeviceSplit
    cycle: int  # steps per learning-rate cycle
    epoch: int  # epochs trained so far
    step: int  # minibatches trained so far


@dataclass
class Steps:
    """What the steps of a plan leave: each step's loss and, with ``attention_penalty``
    > 0, each step's attention penalty (None otherwise), still on the device."""

    losses: torch.Tensor
    penalties: torch.Tensor | None


def train_steps(trainee: Trainee, plan: np.ndarray) -> Steps:
    """One optimiser step per row of ``plan`` (caption rows of the training split,
    ``(steps, batch_size)``, as ``epoch_batches`` makes them). With ``attention_penalty``
    > 0 the step minimises the loss plus that weight times the attention diversity
    penalty; the losses returned are the loss alone."""
    cfg, split, device = trainee.config, trainee.train_split, trainee.device
    rows_on_device = torch.from_numpy(plan).to(device)
    widths = split.lengths[torch.from_numpy(plan)].amax(dim=1).tolist()
    losses = torch.empty(len(plan), device=device)
    penalised = cfg.attention_penalty > 0
    penalties = torch.empty(len(plan), device=device) if penalised else None
    trainee.model.train()
    for i in range(len(plan)):
        with autocast(device, cfg.precision):
            images, captions, penalty = _embed_batch(
                trainee, rows_on_device[i], plan[i], widths[i], penalised
            )
        loss = trainee.loss_fn(at_least_float32(images), at_least_float32(captions))
        objective = loss
        if penalties is not None:
            objective = loss + cfg.attention_penalty * at_least_float32(penalty)
            penalties[i] = penalty.detach()
        trainee.optimizer.zero_grad()
        objective.backward()
        _clip_gradients(trainee.model, cfg)
        trainee.optimizer.step(
            cyclic_cosine_lr(trainee.step, trainee.cycle, cfg.lr_min, cfg.lr_max)
        )
        losses[i] = loss.detach()
        trainee.step += 1
    return Steps(losses, penalties)


def epoch_metrics(
    trainee: Trainee, steps: Steps, captions: int, started: float
) -> dict[str, float]:
    """An epoch's training metrics from its ``steps`` (checked first: a non-finite loss
    or penalty is a ``NonFiniteLossError``), ``captions`` trained and the
    ``time.perf_counter()`` it ``started`` at; ``trainee.epoch`` already counts it."""
    check_finite(trainee, steps.losses.cpu().numpy())
    metrics = {names.LOSS: float(steps.losses.mean())}
    if steps.penalties is not None:
        check_finite(trainee, steps.penalties.cpu().numpy(), "attention penalty")
        metrics[names.ATTENTION_PENALTY] = float(steps.penalties.mean())
    seconds = time.perf_counter() - started
    return {
        **metrics,
        names.LEARNING_RATE: float(trainee.optimizer.lr),
        names.TRAIN_SECONDS: seconds,
        names.CAPTIONS_PER_S: captions / max(seconds, 1e-9),
    }


def check_finite(trainee: Trainee, values: np.ndarray, what: str = "loss") -> None:
    """A ``NonFiniteLossError`` naming the epoch and step where ``values`` (the last
    epoch's, one per step; ``trainee`` already past them) first is NaN or infinite."""
    bad = np.flatnonzero(~np.isfinite(values))
    if len(bad):
        first = int(bad[0])
        step_in_run = trainee.step - len(values) + first
        raise NonFiniteLossError(
            f"the {what} became {values[first]} at epoch {trainee.epoch}, step {first + 1} of "
            f"{len(values)} (minibatch {step_in_run + 1} of the run); lower lr_max "
            f"(now {trainee.config.lr_max}) or enable gradient clipping"
        )


def _embed_batch(
    trainee: Trainee, rows: torch.Tensor, rows_cpu: np.ndarray, width: int, penalised: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One minibatch's two sides, row i of one matching row i of the other, and the
    attention penalty (0 unless ``penalised``): the images and their captions, or
    with ``pairing="caption"`` (the text-only control) each caption's partner, the
    next caption of the same image (``partner_rows``), and the caption."""
    split, model = trainee.train_split, trainee.model
    tokens = split.tokens[rows, :width].long()
    lengths = split.lengths[torch.from_numpy(rows_cpu)]
    if trainee.config.pairing == "caption":
        partner_cpu = partner_rows(rows_cpu)
        partner_lengths = split.lengths[torch.from_numpy(partner_cpu)]
        partner = split.tokens[partner_rows(rows), : int(partner_lengths.max())].long()
        encoder = model.caption_encoder
        captions, penalty = encoder.encode(tokens, lengths, penalty=penalised)
        other = encoder(partner, partner_lengths)
    elif penalised:
        other, captions, penalty = model.forward_with_penalty(
            split.features[rows // 5], tokens, lengths
        )
    else:
        other, captions = model(split.features[rows // 5], tokens, lengths)
        penalty = None
    return other, captions, penalty if penalty is not None else captions.new_zeros(())


def _clip_gradients(model: GroundedEncoder, config: TrainConfig) -> None:
    for module, limit in (
        (model.image_encoder, config.clip_image),
        (model.caption_encoder, config.clip_caption),
    ):
        parameters = list(module.parameters())  # cap2img's image side has none
        if limit > 0 and parameters:
            torch.nn.utils.clip_grad_norm_(parameters, limit, foreach=True)
