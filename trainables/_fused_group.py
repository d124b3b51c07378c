"""A trial group's seats (``trainables.group.TrialGroup``: its configurations at their
seeds) trained as one fused model.

Each seat keeps its own ``Trainer``: its evaluation, test battery (in its background
worker), snapshots, ensemble, history and checkpoint are the ``Trainer``'s own pieces,
as a lone run's. Only where its training epochs come from differs (the ``Trainer``'s
``fused_epochs``): the first member that asks for an epoch trains that epoch of *every*
member in one ``FusedTrainer`` (``FusedGroup.train_member``); each member then gets its
weights copied into its ``Trainer``'s model, its epoch and step, and its own training
metrics (its own losses, checked as a lone ``Trainer``'s are:
``trainables._training.check_finite``).

**Checkpoints.** A member's checkpoint is its ``Trainer``'s, in the lone format: before a
save, ``FusedGroup.push`` writes the member's Adam moments and step count into its
``Trainer``'s optimiser (``_adam_state``), which is then exactly the fused optimiser's
state for that member (the same ``GroupAdam``, elementwise). After a load the fused model is
refilled from the members (``pull``: weights, moments, epoch and step), so a group
resumes from a checkpoint written fused or one after the other, either way.

``time/train_s`` of each member is its share of the fused epoch (the seconds over
``k``), so the group's sum (``group.combine``) is what the epoch cost; captions/s is
the group's throughput.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Collection, Sequence

import torch

from trainables import families, names
from trainables._training import check_finite
from trainables.config import TrainConfig
from trainables.data import TrainingData
from trainables.fused import FusedTrainer
from trainables.loop import Trainer
from trainables.semantic import SemanticEvaluation

__all__ = ["FusedGroup"]

logger = logging.getLogger(__name__)


class FusedGroup:
    """The fused training of ``configs`` (module docstring): the seeds of one
    configuration, or the members of a fused search trial (several configurations of one
    shape), each with its own ``Trainer`` (``trainers``, built as ``TrialGroup`` builds
    its sequential ones, its training epochs from ``train_member``). ``reason``: why it
    fell back to training them one after the other (None while fused). A member that
    leaves (``stop``: stopped early, or its epochs done) keeps its ``Trainer`` with its
    whole state; the others train on."""

    def __init__(
        self,
        configs: Sequence[TrainConfig],
        data: TrainingData,
        semantics: Sequence[SemanticEvaluation | None],
        complete_at: Collection[int] = (),
    ) -> None:
        self.trainers = [
            Trainer(
                config,
                data,
                semantic,
                complete_at=complete_at,
                fused_epochs=functools.partial(self.train_member, i),
            )
            for i, (config, semantic) in enumerate(zip(configs, semantics, strict=True))
        ]
        self.fused = FusedTrainer(configs, data)
        self.synced = False  # the fused model holds the members' current state
        self.reason: str | None = None
        self._pending: dict[int, tuple[dict[str, float], torch.Tensor]] = {}
        self.left: set[int] = set()  # members that left the group (``stop``)

    @property
    def live(self) -> dict[int, Trainer]:
        """The members still training, by index, in their order."""
        return {i: t for i, t in enumerate(self.trainers) if i not in self.left}

    def stop(self, index: int) -> None:
        """Member ``index`` leaves the group: its ``Trainer`` gets its Adam state (so it
        checkpoints as a lone one), its slices of the fused model go."""
        if index in self.left:
            return
        self.left.add(index)
        self._pending.pop(index, None)
        if self.synced and self.reason is None and index in self.fused.member_ids:
            trainer = self.trainers[index]
            _adam_state(trainer, self.fused.member_moments(index), self.fused.step)
            self.fused.stop(index)

    def invalidate(self) -> None:
        """The members were loaded from a checkpoint: refill the fused model before the
        next epoch."""
        self.synced = False
        self._pending.clear()

    def train_member(self, index: int) -> dict[str, float] | None:
        """Member ``index``'s next training epoch (module docstring); None when the
        group trains one after the other."""
        if index in self.left:
            raise RuntimeError(f"member {index} left the group; it trains no more")
        if self.reason is None and index not in self._pending:
            if self._pending:
                raise RuntimeError(
                    f"member {index} asked for epoch {self.trainers[index].epoch + 1} before "
                    f"members {sorted(self._pending)} took epoch {self.fused.epoch}"
                )
            if not self.synced:
                self.pull()
            if self.reason is None:
                self._train_epoch()
        if self.reason is not None:
            return None
        metrics, losses = self._pending.pop(index)
        trainer = self.trainers[index]
        self.fused.copy_member_to(index, trainer.model)
        trainer.epoch, trainer.step = self.fused.epoch, self.fused.step
        trainer.optimizer.lr = metrics[names.LEARNING_RATE]
        check_finite(trainer, losses.cpu().numpy())  # refused as a lone Trainer refuses them
        return metrics

    def _train_epoch(self) -> None:
        fused = self.fused
        started = time.perf_counter()
        plans = fused.plans(fused.epoch)
        losses = fused.train_batches(plans)
        fused.epoch += 1
        share = (time.perf_counter() - started) / len(fused.member_ids)
        for position, member in enumerate(fused.member_ids):
            row = losses[position]
            self._pending[member] = (
                {
                    names.LOSS: float(row.mean()),
                    names.LEARNING_RATE: fused.last_lr[member],
                    names.TRAIN_SECONDS: share,
                    names.CAPTIONS_PER_S: plans.shape[1] * plans.shape[2] / max(share, 1e-9),
                },
                row,
            )

    def fall_back(self, reason: str) -> None:
        """Train one after the other from now on (each member's ``Trainer`` holds its
        whole state whenever this is called: after construction or a load)."""
        self.reason = reason
        logger.warning("the %d fused members train one after the other: %s",
                       len(self.live), reason)  # fmt: skip

    def pull(self) -> None:
        """Fill the fused model from the members' ``Trainer`` s (weights, Adam state,
        epoch and step); fall back when they cannot be one group."""
        positions = {(t.epoch, t.step) for t in self.live.values()}
        if len(positions) != 1:
            self.fall_back(f"their training states differ (epoch, step: {sorted(positions)})")
            return
        own = families.tokenizer_entries(self.fused.tokenizer)
        if any(families.tokenizer_entries(t.tokenizer) != own for t in self.live.values()):
            self.fall_back("the checkpoint's vocabulary is not the data's")
            return
        for index in list(self.fused.member_ids):  # members that left before the load
            if index in self.left:
                self.fused.stop(index)
        for index, trainer in self.live.items():
            weights = trainer.model.state_dict()
            moments = trainer.optimizer.moments() if trainer.optimizer.steps else None
            self.fused.load_member(index, weights, moments)
        ((epoch, step),) = positions
        self.fused.resume_at(epoch, step)
        self.synced = True

    def push(self) -> None:
        """Write each member's Adam state into its ``Trainer``'s optimiser (before a
        checkpoint); its weights, epoch and step are there after every epoch."""
        if not self.synced or self.reason is not None:
            return  # the Trainers hold their state already
        for index, trainer in self.live.items():
            _adam_state(trainer, self.fused.member_moments(index), self.fused.step)


def _adam_state(
    trainer: Trainer, moments: dict[str, tuple[torch.Tensor, torch.Tensor]], steps: int
) -> None:
    """Set ``trainer``'s Adam state to ``moments`` after ``steps`` steps."""
    trainer.optimizer.load_moments(moments)
    trainer.optimizer.steps = steps
