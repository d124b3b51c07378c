"""One model's training run, without Ray or MLflow: the ``Trainer`` builds the model and
its optimiser, then ``run`` trains an epoch, evaluates it, keeps a snapshot and reports,
epoch after epoch; its whole state saves and loads as a checkpoint.

    trainer = Trainer(config, TrainingData.from_store("stores/world"), semantic)
    for metrics in trainer.run():   # epoch 0 (untrained), 1, 2, ...; the last one also
        print(metrics)              # holds the snapshot ensemble's test metrics

The pieces it is made of, each its own room (docs/training.md walks through them):

- training an epoch: ``trainables._training`` (``train_steps``: one optimiser step per
  minibatch; ``epoch_metrics``: the epoch's checked losses), or, for a seat of a fused
  group, the group's fused step (``trainables._fused_group``, ``fused_epochs``);
- scoring a model: ``trainables._evaluation.Evaluation`` (retrieval, the dev semantic
  score, the test battery);
- the test battery's schedule and its background worker: ``trainables._battery`` (whose
  docstring says when a battery runs and which report delivers it);
- the snapshot ensemble: ``trainables._snapshots``;
- the checkpoint's format: ``trainables.checkpoint``.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Collection, Iterator
from typing import Any

import numpy as np
import torch

from trainables import checkpoint, families, names
from trainables._battery import BatterySchedule
from trainables._evaluation import Embeddings, Evaluation, best_so_far
from trainables._snapshots import Snapshot, SnapshotEnsemble
from trainables._training import NonFiniteLossError, Steps, epoch_metrics, train_steps
from trainables.config import TrainConfig
from trainables.data import TrainingData, device_splits, epoch_batches
from trainables.device import set_up_training
from trainables.loss import make_loss
from trainables.model import GroundedEncoder
from trainables.optim import GroupAdam
from trainables.semantic import SemanticEvaluation
from trainables.word_vectors import PretrainedVectors

__all__ = [
    "EpochSource",
    "NonFiniteLossError",
    "Snapshot",
    "Trainer",
]

# a fused group's training epoch for one of its seats (None: the seat trains alone)
EpochSource = Callable[[], "dict[str, float] | None"]


class Trainer:
    """One model trained epoch by epoch (module docstring). Its training state is
    ``model``, ``optimizer``, ``epoch``, ``step``, ``history`` (the metrics reported after
    each epoch) and ``ensemble`` (the snapshots), and saves and loads whole."""

    def __init__(
        self,
        config: TrainConfig,
        data: TrainingData,
        semantic: SemanticEvaluation | None = None,
        *,
        complete_at: Collection[int] = (),
        fused_epochs: EpochSource | None = None,
    ) -> None:
        """``complete_at``: epochs whose report must hold their own test battery, waiting
        for the background worker (where a scheduler may stop the trial;
        ``trainables._battery``); the last epoch's always does. ``fused_epochs``: where the
        training epochs of a seat of a fused group come from (None: it trains alone)."""
        self.config = config
        self._data = data
        self.device = set_up_training(config, data.train.num_images)
        # the model's input: the alphabet, or the vocabulary of the training captions
        self.tokenizer = families.build_tokenizer(config, data.train.captions)
        pretrained = families.load_pretrained(config, self.tokenizer)
        torch.manual_seed(config.seed)
        self.model = self._new_model(pretrained)
        self.optimizer = GroupAdam(dict(self.model.named_parameters()), lr=config.lr_min)
        self.loss_fn = make_loss(config)
        self.semantic = semantic
        self._place_data()
        self.steps_per_epoch = 5 * (data.train.num_images // config.batch_size)
        self.cycle = self.steps_per_epoch * config.cycle_epochs
        self.epoch = 0  # epochs trained so far
        self.step = 0  # minibatches trained so far
        self.history: list[dict[str, float]] = []  # the metrics reported after each epoch
        self.complete_at = frozenset(int(e) for e in complete_at)
        self.battery = BatterySchedule(self.device, config.semantic_every if semantic else 0)
        self.ensemble = SnapshotEnsemble(config)
        self._fused_epochs = fused_epochs
        self._penalties: torch.Tensor | None = None  # the last epoch's attention penalties
        self._test_embeddings: Embeddings | None = None  # this epoch's, for its snapshot

    def _new_model(
        self, pretrained: PretrainedVectors | None = None, state: dict[str, Any] | None = None
    ) -> GroundedEncoder:
        """A model of the config and the tokenizer on the device; ``state``: its weights."""
        model = GroundedEncoder(self.config, self._data.feature_dim, self.tokenizer, pretrained)
        model = model.to(self.device)
        if state is not None:
            model.load_state_dict(state)
        return model

    def _place_data(self) -> None:
        """The splits on the device, encoded for the tokenizer, and what scores on them."""
        splits = device_splits(self._data, self.device, self.tokenizer)
        self.train_split, self.val_split, self.test_split = splits
        self.evaluation = Evaluation(
            self.config, self.semantic, self.tokenizer, self.device, splits[1:]
        )

    # -- the loop --------------------------------------------------------------

    def run(self) -> Iterator[dict[str, float]]:
        """Yield one dict of metrics per epoch, each epoch once: epoch 0 (untrained), then
        every trained epoch (a resumed run continues after its last reported epoch). The
        last epoch's dict also holds the snapshot ensemble's test metrics
        (``ensemble/...``). A run resumed to end at the epoch it had stopped at (a shorter
        ``epochs`` than it was started with) yields that epoch again, with its ensemble."""
        epochs, battery = self.config.epochs, self.battery
        try:
            if self._resume():  # to end at the epoch it stopped at: that epoch again
                ensemble = self.ensemble_metrics()  # while a lost battery runs again
                self.history[-1] = {**self.history[-1], **battery.wait(), **ensemble}
                yield self.history[-1]
                return
            while len(self.history) <= epochs:  # the history holds epochs 0..self.epoch
                # 1. train an epoch (epoch 0: none, the untrained model) and evaluate
                metrics = self.evaluate_epoch(self.train_one_epoch() if self.history else {})
                # 2. a snapshot at the end of every snapshot_interval epochs
                if self.ensemble.due(self.epoch):
                    score = metrics[names.PRIMARY_RETRIEVAL]
                    self.ensemble.keep(self.epoch, score, self.model, self._test_embeddings)
                # 3. the report: with an earlier epoch's battery, the ensemble's test
                # metrics after the last epoch, and its own battery where it must wait
                late = battery.take_late()
                if self.epoch == epochs:
                    metrics.update(self.ensemble_metrics())  # while this epoch's battery runs
                if self.epoch == epochs or self.epoch in self.complete_at:
                    battery.collect_own(metrics)
                self.history.append(metrics)
                yield {**metrics, **late}
        finally:  # also when the run stops in between: keep the batteries that finished
            battery.settle(self.history)

    def _resume(self) -> bool:
        """Whether this run ends at the epoch it stopped at (resumed with that
        ``epochs``), once the batteries its stop left behind are seen to: one still
        running when it stopped is filed, one lost with the run that wrote the checkpoint
        is started again."""
        self.battery.collect_left(self.history)
        if not self.history:
            return False
        last = self.history[-1]
        again = self.epoch == self.config.epochs and not names.is_finished(last)
        if self.battery.missing(last) and (again or len(self.history) <= self.config.epochs):
            self._start_battery()
        return again

    def train_one_epoch(self) -> dict[str, float]:
        """The next epoch's training and its metrics: the fused group's (a seat of one),
        or trained here alone (``trainables._training``)."""
        metrics = self._fused_epochs() if self._fused_epochs is not None else None
        if metrics is not None:
            return metrics
        started = time.perf_counter()
        cfg = self.config
        plan = epoch_batches(self.train_split.num_images, cfg.batch_size, cfg.seed, self.epoch)
        losses = self.train_batches(plan)
        self.epoch += 1
        steps = Steps(losses, self._penalties)
        return epoch_metrics(self, steps, len(plan) * cfg.batch_size, started)

    def train_batches(self, plan: np.ndarray) -> torch.Tensor:
        """One optimiser step per row of ``plan`` (``epoch_batches``' rows); the losses,
        still on the device (``train_one_epoch`` runs an epoch's plan through it;
        benchmarks time a few steps of the same code path with it)."""
        steps = train_steps(self, plan)
        self._penalties = steps.penalties
        return steps.losses

    def evaluate_epoch(self, train_metrics: dict[str, float]) -> dict[str, float]:
        """The current model after an epoch: dev retrieval and the dev semantic score
        (selection), test retrieval and, every ``semantic_every`` epochs, the test
        battery (reporting: only started here, in the background worker, its metrics
        coming later: ``trainables._battery``), and the best dev values so far. A
        battery still running from an earlier epoch is collected here first
        (``time/eval_s`` counts any wait)."""
        started = time.perf_counter()
        metrics: dict[str, float] = {"epoch": float(self.epoch), **train_metrics}
        models, evaluation = [self.model], self.evaluation
        due = self.battery.due(self.epoch)
        early = due and not self.battery.worker.busy
        if early:  # the worker is free: it embeds while the evaluation below runs
            self._start_battery()
        metrics.update(evaluation.retrieval(self.val_split, models, names.DEV)[0])
        test, self._test_embeddings = evaluation.retrieval(self.test_split, models, names.TEST)
        metrics.update(test)
        metrics.update(evaluation.semantic_scores(models, dev=True, battery=None))
        metrics.update(best_so_far(self.history, metrics))
        self.battery.collect_earlier(self.epoch, self.history)  # for this epoch's report
        if due and not early:
            self._start_battery()
        metrics[names.EVAL_SECONDS] = time.perf_counter() - started
        return metrics

    def _start_battery(self) -> None:
        """The current model's test battery (under ``test/``), started in the background;
        its sentences' embeddings kept for the ensemble where this epoch may join it."""
        keep = self.ensemble.keeper(self.epoch, self.battery.worker.table_ready)
        job = functools.partial(
            self.evaluation.semantic_scores, dev=False, battery=names.TEST, on_table=keep
        )
        self.battery.start(self.epoch, self.model, job)

    def ensemble_metrics(self) -> dict[str, float]:
        """Test metrics of the ensemble of the best snapshots under ``ensemble/``
        (``trainables._snapshots``); the current model's when no snapshot was taken."""
        current = (self.epoch, self.model, self._test_embeddings)
        build = functools.partial(self._new_model, None)
        return self.ensemble.metrics(self.evaluation, current, build, self.battery.worker)

    # -- checkpoints -----------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: weights, optimiser, schedule position,
        RNG states, history and snapshots, in ``trainables.checkpoint``'s format."""
        return {
            **checkpoint.training_state_header(),
            "config": self.config.to_dict(),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.epoch,
            "step": self.step,
            "history": self.history,
            "snapshots": [
                {"epoch": s.epoch, "score": s.score, "state": s.state}
                for s in self.ensemble.snapshots
            ],
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            },
            **families.tokenizer_entries(self.tokenizer),
        }

    def load_state_dict(self, state: dict[str, Any], what: str = "") -> None:
        """Continue from ``state_dict()``'s dictionary. A word model continues with the
        vocabulary it was trained with (saved in ``state``), whatever the data's. The one
        place a checkpoint's weights go into the model."""
        what = what or "the checkpoint"
        checkpoint.check_resumable(state["config"], self.config, what)
        try:
            saved = families.tokenizer_from_entries(self.config, state)
        except ValueError as err:
            raise checkpoint.CheckpointError(f"{what}: {err}") from None
        if families.tokenizer_entries(saved) != families.tokenizer_entries(self.tokenizer):
            self.tokenizer = saved  # the weights and the optimiser follow from state
            self.model = self._new_model()
            self.optimizer = GroupAdam(dict(self.model.named_parameters()), lr=self.config.lr_min)
            self._place_data()
        try:
            self.model.load_state_dict(state["model"])
        except (RuntimeError, KeyError) as err:  # names or shapes of another model
            raise checkpoint.CheckpointError(
                f"{what}: its model's weights are not those of the model its config builds "
                f"({checkpoint.weight_mismatch(err)})"
            ) from None
        try:
            self.optimizer.load_state_dict(state["optimizer"])
        except (KeyError, TypeError, ValueError) as err:
            raise checkpoint.CheckpointError(f"{what}: its optimiser state: {err}") from None
        self.epoch, self.step = int(state["epoch"]), int(state["step"])
        if self.optimizer.steps != self.step:  # every step is one of Adam's
            raise checkpoint.CheckpointError(
                f"{what}: its optimiser state: {self.optimizer.steps} steps, "
                f"the training state {self.step}"
            )
        self.history = list(state["history"])
        self.ensemble.snapshots = [
            Snapshot(s["epoch"], s["score"], s["state"]) for s in state["snapshots"]
        ]
        torch.set_rng_state(state["rng"]["torch"])
        if state["rng"]["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])

    def save_checkpoint(self) -> bytes:
        return checkpoint.to_bytes(self.state_dict())

    def load_checkpoint(self, data: bytes | str | os.PathLike[str], what: str = "") -> None:
        """Continue from a training state (``save_checkpoint``'s bytes, or a file of them);
        a file that is not one, or of another config, is a ``CheckpointError`` naming
        ``what`` (default: the file)."""
        what = what or (os.fspath(data) if not isinstance(data, bytes) else "checkpoint")
        self.load_state_dict(checkpoint.load_training_state(data, self.device, what), what)
