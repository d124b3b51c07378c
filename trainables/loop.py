"""The training loop, without Ray or MLflow: a ``Trainer`` that trains one epoch,
evaluates, keeps snapshots, ensembles them, and checkpoints its whole state.

    trainer = Trainer(config, TrainingData.from_store("stores/world"), semantic)
    for metrics in trainer.run():   # epoch 0 (untrained), 1, 2, ...; the last one also
        print(metrics)              # holds the snapshot ensemble's test metrics

On a GPU the data live on the device and a step never waits for the host: the batch
plan of an epoch is uploaded once, losses stay on the device until the epoch ends,
and the lengths that packing needs are read from a host copy.

The test battery off the critical path: nothing selects on the battery, so after an
epoch the Trainer evaluates what selects (dev retrieval, the dev semantic score) and
test retrieval in place, and hands the battery to a background worker
(``trainables._battery.BatteryWorker``: a thread, on a GPU with its own CUDA stream)
that embeds and scores with a copy of the epoch's weights while the next epoch trains.
Its metrics are filed under their own epoch: the battery started after epoch e is
collected at the end of epoch e + 1 (waiting there only if it is not done), merged into
``history[e]`` (where the checkpoint keeps it), and delivered with the report of epoch
e + 1 as ``names.late(key)`` beside ``names.LATE_EPOCH`` = e, which the search's
tracking callback logs at MLflow step e (``gridsearch.tracking``). The same rule for
every epoch makes the delivery deterministic (a trial's seeds deliver alike). Where a
report must hold its own battery it waits for it: the last epoch (whose report also
holds the ensemble's, computed while the battery runs) and the epochs in
``complete_at`` (where a scheduler may stop the trial: ASHA's rungs; every epoch in it,
each report holds its own battery). A run that stops in between (an interrupt, a closed
generator) files the batteries that finished into ``history``; a battery still running
is lost with the run, but a run resumed from a checkpoint whose last epoch lacks its
battery computes it again from the checkpoint's weights (those very weights) and
delivers it with the next report (a run resumed only to finish that last epoch waits
for it in that epoch's report). The worker is the Trainer's one path; the battery
computed in place, in the training thread, is a reference outside the package
(``bench/_in_place_battery.py``), which the tests hold the worker's metrics to
(tests/trainables/test_loop.py) and ``bench/bench_eval.py`` times the first path with.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from trainables import checkpoint, families, names
from trainables._battery import BatteryWorker
from trainables.config import TrainConfig
from trainables.data import DeviceSplit, TrainingData, device_splits, epoch_batches, partner_rows
from trainables.device import autocast, set_up_training
from trainables.embedding import embed_captions, embed_images, embed_sentences
from trainables.loss import at_least_float32, make_loss
from trainables.metrics import retrieval_metrics
from trainables.model import GroundedEncoder
from trainables.optim import GroupAdam
from trainables.schedule import cyclic_cosine_lr
from trainables.semantic import (
    DevSemanticEvaluator,
    EmbeddingTable,
    SemanticEvaluation,
    SemanticEvaluator,
)
from trainables.vocabulary import Tokenizer
from trainables.word_vectors import PretrainedVectors

__all__ = [
    "NonFiniteLossError",
    "Snapshot",
    "Trainer",
]


logger = logging.getLogger(__name__)

EmbedFn = Callable[[Sequence[str]], torch.Tensor]


def _as_encoded(summed: torch.Tensor, models: int) -> torch.Tensor:
    """The sum of ``models`` models' sentence embeddings as ``SentenceEncoder.encode``
    gives it by default, L2-normalised, so that the semantic scores a run reports (its
    ensemble's above all) are the ones its saved model reproduces: the supervised
    relatedness protocol is not scale-free. One model's is normalised already (by the
    model), and is left as it is."""
    return summed if models <= 1 else torch.nn.functional.normalize(summed, dim=1)


def _summed(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Their sum from zeros, in order: what ``trainables.embedding`` computes for an
    ensemble from its models' embeddings (the same additions, so the same values)."""
    total = torch.zeros_like(tensors[0])
    for tensor in tensors:
        total += tensor
    return total


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; the message names the epoch and step."""


@dataclass
class Snapshot:
    epoch: int
    score: float  # dev R@10 mean at that epoch
    state: dict[str, torch.Tensor]  # the model's weights, on the CPU
    # its test split's (image, caption) embeddings from its epoch's evaluation, which the
    # ensemble sums instead of embedding again (never checkpointed: a resumed run's
    # snapshots embed again)
    test: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, repr=False, compare=False)


class Trainer:
    def __init__(
        self,
        config: TrainConfig,
        data: TrainingData,
        semantic: SemanticEvaluation | None = None,
        *,
        complete_at: Collection[int] = (),
    ) -> None:
        """``complete_at``: epochs whose report must hold their own test battery, waiting
        for the background worker (where a scheduler may stop the trial; see the module
        docstring); the last epoch's always does. The snapshot ensemble sums the
        embeddings its snapshots got at their own epochs (test split, battery sentences)
        where it has them (a resumed run's snapshots are embedded again), and a battery
        starts before the epoch's in-place evaluation when the worker is free."""
        self.config = config
        self.device = set_up_training(config, data.train.num_images)
        # the model's input: the alphabet, or the vocabulary of the training captions
        self.tokenizer: Tokenizer = families.build_tokenizer(config, data.train.captions)
        pretrained = families.load_pretrained(config, self.tokenizer)
        torch.manual_seed(config.seed)
        self.model = self._new_model(data.feature_dim, pretrained)
        self.optimizer = self._new_optimizer()
        self.loss_fn = make_loss(config)
        self.semantic = semantic
        self._data = data
        self._place_splits()
        self.steps_per_epoch = 5 * (data.train.num_images // config.batch_size)
        self.cycle = self.steps_per_epoch * config.cycle_epochs
        self.epoch = 0  # epochs trained so far
        self.step = 0  # minibatches trained so far
        self.history: list[dict[str, float]] = []  # the metrics reported after each epoch
        self.snapshots: list[Snapshot] = []  # the best `ensemble_size` snapshots so far
        self._penalties: torch.Tensor | None = None  # the last epoch's attention penalties
        self.complete_at = frozenset(int(e) for e in complete_at)
        self._battery = BatteryWorker(self.device)  # the background battery (module doc)
        self._late: dict[str, float] = {}  # an earlier epoch's battery, for the next report
        self._test_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None  # this epoch's
        # the battery sentences' embeddings (CPU) of epochs that may join the ensemble,
        # written by the battery (perhaps in the worker), read by ensemble_metrics
        self._tables: dict[int, torch.Tensor] = {}
        self._tables_lock = threading.Lock()

    def _new_model(
        self, feature_dim: int, pretrained: PretrainedVectors | None = None
    ) -> GroundedEncoder:
        model = GroundedEncoder(self.config, feature_dim, self.tokenizer, pretrained)
        return model.to(self.device)

    def _new_optimizer(self) -> GroupAdam:
        return GroupAdam(dict(self.model.named_parameters()), lr=self.config.lr_min)

    def _place_splits(self) -> None:
        splits = device_splits(self._data, self.device, self.tokenizer)
        self.train_split, self.val_split, self.test_split = splits

    # -- the loop --------------------------------------------------------------

    def run(self) -> Iterator[dict[str, float]]:
        """Yield one dict of metrics per epoch, each epoch once: epoch 0 (untrained), then
        every trained epoch (a resumed run continues after its last reported epoch). The
        last epoch's dict also holds the snapshot ensemble's test metrics
        (``ensemble/...``). A run resumed to end at the epoch it had stopped at (a shorter
        ``epochs`` than it was started with) yields that epoch again, with its ensemble."""
        try:
            yield from self._run()
        finally:  # also when the run stops in between: keep the batteries that finished
            self._settle()

    def _run(self) -> Iterator[dict[str, float]]:
        if self._battery.busy:  # left running by a run of this Trainer that stopped
            epoch, battery = self._battery.collect()
            if any(int(m["epoch"]) == epoch for m in self.history):
                self._late = self._file_battery(epoch, battery)
        last = self.history[-1] if self.history else None
        missing = last is not None and self._battery_missing(last)
        if last is not None and self.epoch == self.config.epochs and not names.is_finished(last):
            if missing:  # lost with the run that wrote the checkpoint: again, waited for
                self._start_battery()
            ensemble = self.ensemble_metrics()  # while the battery runs
            battery = self._battery.collect()[1] if missing else {}
            self.history[-1] = {**last, **battery, **ensemble}
            yield self.history[-1]
            return
        if missing and len(self.history) <= self.config.epochs:
            self._start_battery()  # lost with the run that wrote the checkpoint: again
        while len(self.history) <= self.config.epochs:  # history holds epochs 0..self.epoch
            metrics = self.evaluate_epoch(self.train_one_epoch() if self.history else {})
            late, self._late = self._late, {}
            final = self.epoch == self.config.epochs
            if final:
                metrics.update(self.ensemble_metrics())  # while this epoch's battery runs
            if self._battery.busy and (final or self.epoch in self.complete_at):
                waited = time.perf_counter()
                metrics.update(self._battery.collect()[1])
                metrics[names.EVAL_SECONDS] += time.perf_counter() - waited
            self.history.append(metrics)
            yield {**metrics, **late}

    def train_one_epoch(self) -> dict[str, float]:
        cfg = self.config
        started = time.perf_counter()
        plan = epoch_batches(self.train_split.num_images, cfg.batch_size, cfg.seed, self.epoch)
        losses = self.train_batches(plan)
        self.epoch += 1
        self._check_finite(losses.cpu().numpy())
        metrics = {names.LOSS: float(losses.mean())}
        if self._penalties is not None:
            self._check_finite(self._penalties.cpu().numpy(), "attention penalty")
            metrics[names.ATTENTION_PENALTY] = float(self._penalties.mean())
        seconds = time.perf_counter() - started
        return {
            **metrics,
            names.LEARNING_RATE: float(self.optimizer.lr),
            names.TRAIN_SECONDS: seconds,
            names.CAPTIONS_PER_S: len(plan) * cfg.batch_size / max(seconds, 1e-9),
        }

    def train_batches(self, plan: np.ndarray) -> torch.Tensor:
        """One optimiser step per row of ``plan`` (caption rows of the training split,
        ``(steps, batch_size)``, as ``epoch_batches`` makes them); the losses, still on
        the device. ``train_one_epoch`` runs an epoch's plan through it; benchmarks time
        a few steps of the same code path with it. With ``attention_penalty`` > 0 the
        step minimises the loss plus that weight times the attention diversity penalty,
        whose values stay in ``_penalties``; the losses returned are the loss alone."""
        cfg, split = self.config, self.train_split
        rows_on_device = torch.from_numpy(plan).to(self.device)
        widths = split.lengths[torch.from_numpy(plan)].amax(dim=1).tolist()
        losses = torch.empty(len(plan), device=self.device)
        penalised = cfg.attention_penalty > 0
        penalties = torch.empty(len(plan), device=self.device) if penalised else None
        self.model.train()
        for i in range(len(plan)):
            with autocast(self.device, cfg.precision):
                images, captions, penalty = self._embed_batch(
                    rows_on_device[i], plan[i], widths[i], penalised
                )
            loss = self.loss_fn(at_least_float32(images), at_least_float32(captions))
            objective = loss
            if penalties is not None:
                objective = loss + cfg.attention_penalty * at_least_float32(penalty)
                penalties[i] = penalty.detach()
            self.optimizer.zero_grad()
            objective.backward()
            self._clip_gradients()
            self.optimizer.step(cyclic_cosine_lr(self.step, self.cycle, cfg.lr_min, cfg.lr_max))
            losses[i] = loss.detach()
            self.step += 1
        self._penalties = penalties
        return losses

    def _embed_batch(
        self, rows: torch.Tensor, rows_cpu: np.ndarray, width: int, penalised: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One minibatch's two sides, row i of one matching row i of the other, and the
        attention penalty (0 unless ``penalised``): the images and their captions, or
        with ``pairing="caption"`` (the text-only control) each caption's partner, the
        next caption of the same image (``partner_rows``), and the caption."""
        split = self.train_split
        tokens = split.tokens[rows, :width].long()
        lengths = split.lengths[torch.from_numpy(rows_cpu)]
        if self.config.pairing == "caption":
            partner_cpu = partner_rows(rows_cpu)
            partner_lengths = split.lengths[torch.from_numpy(partner_cpu)]
            partner = split.tokens[partner_rows(rows), : int(partner_lengths.max())].long()
            encoder = self.model.caption_encoder
            captions, penalty = encoder.encode(tokens, lengths, penalty=penalised)
            other = encoder(partner, partner_lengths)
        elif penalised:
            other, captions, penalty = self.model.forward_with_penalty(
                split.features[rows // 5], tokens, lengths
            )
        else:
            other, captions = self.model(split.features[rows // 5], tokens, lengths)
            penalty = None
        return other, captions, penalty if penalty is not None else captions.new_zeros(())

    def _clip_gradients(self) -> None:
        for module, limit in (
            (self.model.image_encoder, self.config.clip_image),
            (self.model.caption_encoder, self.config.clip_caption),
        ):
            parameters = list(module.parameters())  # cap2img's image side has none
            if limit > 0 and parameters:
                torch.nn.utils.clip_grad_norm_(parameters, limit, foreach=True)

    def _check_finite(self, losses: np.ndarray, what: str = "loss") -> None:
        bad = np.flatnonzero(~np.isfinite(losses))
        if len(bad):
            first = int(bad[0])
            step_in_run = self.step - len(losses) + first
            raise NonFiniteLossError(
                f"the {what} became {losses[first]} at epoch {self.epoch}, step {first + 1} of "
                f"{len(losses)} (minibatch {step_in_run + 1} of the run); lower lr_max "
                f"(now {self.config.lr_max}) or enable gradient clipping"
            )

    # -- evaluation ------------------------------------------------------------

    def evaluate_epoch(self, train_metrics: dict[str, float]) -> dict[str, float]:
        """The current model after an epoch: dev retrieval and the dev semantic score
        (selection), test retrieval and, every ``semantic_every`` epochs, the test
        battery (reporting: only started here, in the background worker, its metrics
        coming later, see the module docstring); the best dev values so far; and a
        snapshot at the end of every ``snapshot_interval`` epochs, chosen on dev R@10
        mean. A battery still running from an earlier epoch is collected here first
        (``time/eval_s`` counts any wait)."""
        started = time.perf_counter()
        metrics: dict[str, float] = {"epoch": float(self.epoch), **train_metrics}
        models = [self.model]
        due = self.battery_due(self.epoch)
        early = due and not self._battery.busy
        if early:  # the worker is free: it embeds while the evaluation below runs
            self._start_battery()
        metrics.update(self._retrieval(self.val_split, models, names.DEV))
        metrics.update(self._retrieval(self.test_split, models, names.TEST, keep=True))
        metrics.update(self._semantic(models, dev=True, battery=None))
        for name in (names.PRIMARY_RETRIEVAL, names.PRIMARY_SEMANTIC):
            seen = [h[name] for h in self.history if name in h] + [metrics.get(name, math.nan)]
            if not all(math.isnan(v) for v in seen):
                metrics[names.best(name)] = float(np.nanmax(seen))
        if self._battery.busy and self._battery.epoch != self.epoch:
            # the previous epoch's battery: its metrics go with this report
            self._late = self._file_battery(*self._battery.collect())
        if due and not early:
            self._start_battery()
        metrics[names.EVAL_SECONDS] = time.perf_counter() - started
        if self.epoch and self.epoch % self.config.snapshot_interval == 0:
            self._keep_snapshot(metrics[names.PRIMARY_RETRIEVAL])
        return metrics

    # -- the test battery (see the module docstring) ----------------------------------

    def battery_due(self, epoch: int) -> bool:
        every = self.config.semantic_every
        return self.semantic is not None and bool(every) and epoch % every == 0

    def _battery_missing(self, metrics: Mapping[str, float]) -> bool:
        """``metrics`` (an epoch of ``history``) should hold the test battery and do not:
        it was running when the run that reported them stopped."""
        epoch = int(metrics["epoch"])
        return self.battery_due(epoch) and names.key(names.TEST, "semantic") not in metrics

    def _start_battery(self) -> None:
        """The current model's battery (under ``test/``), started in the background
        worker."""
        job = functools.partial(
            self._semantic, dev=False, battery=names.TEST, on_table=self._keeper(self.epoch)
        )
        self._battery.start(self.epoch, self.model, job)

    def _may_join_ensemble(self, epoch: int) -> bool:
        """Whether the model of ``epoch`` may be one of the ensemble's: a snapshot epoch,
        or the last (the ensemble of a run without snapshots is its last model)."""
        interval = self.config.snapshot_interval
        return epoch == self.config.epochs or (epoch > 0 and epoch % interval == 0)

    def _keeper(self, epoch: int) -> Callable[[EmbeddingTable], None] | None:
        """What keeps the battery table of ``epoch`` for the ensemble (None: nothing)."""
        if not self._may_join_ensemble(epoch):
            return None

        def keep(table: EmbeddingTable) -> None:
            with self._tables_lock:
                self._tables[epoch] = table.vectors.cpu()
            self._battery.table_ready.set()  # (only read while the worker runs this epoch)

        return keep

    def _file_battery(self, epoch: int, battery: Mapping[str, float]) -> dict[str, float]:
        """File an earlier epoch's battery into ``history`` (where it belongs); the
        ``late/`` form the next report carries it in."""
        for metrics in reversed(self.history):
            if int(metrics["epoch"]) == epoch:
                metrics.update(battery)
                break
        else:
            raise RuntimeError(f"the battery of epoch {epoch} has no epoch in the history")
        return {names.LATE_EPOCH: float(epoch), **{names.late(k): v for k, v in battery.items()}}

    def _settle(self) -> None:
        """A run that stops: a battery that finished goes into ``history`` (and so into
        the next checkpoint); one still running is left to finish unread."""
        if self._battery.finished:
            with contextlib.suppress(Exception):  # a failed battery: nothing to keep
                epoch, battery = self._battery.collect()
                if any(int(m["epoch"]) == epoch for m in self.history):
                    self._file_battery(epoch, battery)

    def _keep_snapshot(self, score: float) -> None:
        state = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        self.snapshots.append(Snapshot(self.epoch, score, state, self._test_embeddings))
        self.snapshots.sort(key=lambda s: (-s.score, s.epoch))
        del self.snapshots[self.config.ensemble_size :]
        kept = {s.epoch for s in self.snapshots} | {self.epoch}
        with self._tables_lock:  # tables of snapshots dropped are not needed any more
            for epoch in [e for e in self._tables if e not in kept]:
                del self._tables[epoch]

    def ensemble_metrics(self) -> dict[str, float]:
        """Test metrics of the ensemble of the best snapshots under ``ensemble/``: its
        retrieval of embeddings summed on both sides, not renormalised; its semantic
        battery of the sums L2-normalised, as the saved ensemble encodes by default; the
        current model when no snapshot was taken. The sums are of the embeddings the
        snapshots got at their epochs, where kept (the same numbers as embedding again:
        a resumed run's snapshots are embedded again)."""
        members: list[tuple[int, Any, dict[str, torch.Tensor] | None]]
        members = [(s.epoch, s.test, s.state) for s in self.snapshots]
        if not members:
            members = [(self.epoch, self._test_embeddings, None)]
        made: dict[int, GroundedEncoder] = {}

        def model(i: int) -> GroundedEncoder:  # built when first needed
            state = members[i][2]
            if i not in made:
                made[i] = self.model if state is None else self._model_from(state)
            return made[i]

        metrics: dict[str, float] = {names.ENSEMBLE_SIZE: float(len(members))}
        for k, snap in enumerate(self.snapshots):
            metrics[names.ensemble_epoch(k + 1)] = float(snap.epoch)
        tests = [test for _, test, _ in members]
        if all(test is not None for test in tests):
            with torch.inference_mode():
                images = _summed([test[0] for test in tests if test is not None])
                captions = _summed([test[1] for test in tests if test is not None])
                values = retrieval_metrics(images, captions)
            metrics.update({names.key(names.ENSEMBLE, k): float(v) for k, v in values.items()})
        else:
            models = [model(i) for i in range(len(members))]
            metrics.update(self._retrieval(self.test_split, models, names.ENSEMBLE))
        if self.semantic is not None:
            metrics.update(self._ensemble_battery([epoch for epoch, _, _ in members], model))
        return metrics

    def _ensemble_battery(
        self, epochs: Sequence[int], model: Callable[[int], GroundedEncoder]
    ) -> dict[str, float]:
        """The ensemble's battery (``ensemble/``) from its members' battery tables: those
        kept at their epochs, the one the worker is embedding now (waited for, after the
        others are embedded here), and the rest embedded now."""
        assert self.semantic is not None
        sentences = self.semantic.test.sentences
        if not sentences:
            return {}
        running = self._battery.epoch if self._battery.busy else None
        vectors: dict[int, torch.Tensor] = {}
        for wait in (False, True):
            for i, epoch in enumerate(epochs):
                if wait != (epoch == running) or i in vectors:
                    continue
                if wait:
                    self._battery.table_ready.wait()
                with self._tables_lock:
                    kept = self._tables.get(epoch)
                if kept is None:
                    with torch.inference_mode():
                        kept = self.embed_fn([model(i)])(sentences).cpu()
                vectors[i] = kept
        with torch.inference_mode():
            total = _as_encoded(_summed([vectors[i] for i in range(len(epochs))]), len(epochs))
        values = self.semantic.test(EmbeddingTable(sentences, total.to(self.device)))
        return {names.key(names.ENSEMBLE, k): float(v) for k, v in values.items()}

    def _retrieval(
        self,
        split: DeviceSplit,
        models: Sequence[GroundedEncoder],
        prefix: str,
        *,
        keep: bool = False,
    ) -> dict[str, float]:
        """Retrieval metrics of ``models`` on ``split`` under ``prefix``; ``keep``: keep
        the embeddings as the current epoch's test embeddings (for its snapshot)."""
        with torch.inference_mode():
            images, captions = self.embed_split(split, models)
            values = retrieval_metrics(images, captions)
        if keep:
            self._test_embeddings = (images, captions)
        return {names.key(prefix, k): float(v) for k, v in values.items()}

    def _semantic(
        self,
        models: Sequence[GroundedEncoder],
        *,
        dev: bool,
        battery: str | None,
        on_table: Callable[[EmbeddingTable], None] | None = None,
    ) -> dict[str, float]:
        """The dev semantic score (``dev``) and the test battery under the name prefix
        ``battery`` (when given), every sentence embedded once for both; ``on_table``
        (the battery alone) gets the table of the battery's sentences before they are
        scored."""
        if self.semantic is None:
            return {}
        evaluators: list[tuple[str, DevSemanticEvaluator | SemanticEvaluator]] = []
        if dev and self.semantic.dev:
            evaluators.append((names.DEV, self.semantic.dev))
        if battery is not None:
            evaluators.append((battery, self.semantic.test))
        sentences = [s for _, evaluator in evaluators for s in evaluator.sentences]
        if not sentences:
            return {}
        table = EmbeddingTable.build(self.embed_fn(models), sentences)
        if on_table is not None and not dev:
            on_table(table)
        metrics: dict[str, float] = {}
        for prefix, evaluator in evaluators:
            metrics.update({names.key(prefix, k): float(v) for k, v in evaluator(table).items()})
        return metrics

    def _model_from(self, state: dict[str, torch.Tensor]) -> GroundedEncoder:
        model = self._new_model(self._data.feature_dim)
        model.load_state_dict(state)
        return model

    def embed_split(
        self, split: DeviceSplit, models: Sequence[GroundedEncoder]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Image and caption embeddings of ``split``, summed over ``models``."""
        images = embed_images(models, split.features)
        captions = embed_captions(
            models,
            split.tokens,
            split.lengths,
            batch_size=self.config.eval_batch_size,
            precision=self.config.precision,
        )
        return images, captions

    def embed_fn(self, models: Sequence[GroundedEncoder]) -> EmbedFn:
        """Sentences -> caption embeddings summed over ``models``, as a saved ensemble
        encodes them by default (``_as_encoded``), for the semantic sets."""

        def embed(sentences: Sequence[str]) -> torch.Tensor:
            summed = embed_sentences(
                models,
                sentences,
                batch_size=self.config.eval_batch_size,
                precision=self.config.precision,
                encoding=self.tokenizer,
            )
            return _as_encoded(summed, len(models))

        return embed

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
                {"epoch": s.epoch, "score": s.score, "state": s.state} for s in self.snapshots
            ],
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            },
            **families.tokenizer_entries(self.tokenizer),
        }

    def load_state_dict(self, state: dict[str, Any], what: str = "") -> None:
        """Continue from ``state_dict()``'s dictionary. A word model continues with the
        vocabulary it was trained with (saved in ``state``), whatever the data's."""
        what = what or "the checkpoint"
        checkpoint.check_resumable(state["config"], self.config, what)
        try:
            saved = families.tokenizer_from_entries(self.config, state)
        except ValueError as err:
            raise checkpoint.CheckpointError(f"{what}: {err}") from None
        if families.tokenizer_entries(saved) != families.tokenizer_entries(self.tokenizer):
            self.tokenizer = saved  # the weights and the optimiser follow from state
            self.model = self._new_model(self._data.feature_dim)
            self.optimizer = self._new_optimizer()
            self._place_splits()
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
        self.snapshots = [Snapshot(s["epoch"], s["score"], s["state"]) for s in state["snapshots"]]
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
