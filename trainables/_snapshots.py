"""The snapshot ensemble (docs/protocols.md section 3): the model's weights at the end of
every ``snapshot_interval`` epochs, the best ``ensemble_size`` of them by dev R@10 mean
kept, and after the last epoch their ensemble scored on the test data: the retrieval of
the embeddings summed on both sides (not renormalised), and the battery of the sentence
embeddings summed and L2-normalised, as the saved ensemble encodes by default. A run
without snapshots is an ensemble of its last model.

The ensemble sums the embeddings its snapshots got at their own epochs where it has
them: the test split's, kept with the snapshot, and the battery sentences', kept here as
the battery embeds them (perhaps in the background worker, ``trainables._battery``);
the same numbers as embedding again. A resumed run's snapshots (their weights only, in
the checkpoint) are embedded again.

    ensemble = SnapshotEnsemble(config)
    if ensemble.due(epoch):
        ensemble.keep(epoch, metrics["dev/r10_mean"], model, test_embeddings)
    metrics = ensemble.metrics(evaluation, (epoch, model, test_embeddings), build, worker)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from trainables import names
from trainables._battery import BatteryWorker
from trainables._evaluation import Embeddings, Evaluation, keyed, summed
from trainables.config import OptimConfig
from trainables.metrics import retrieval_metrics
from trainables.model import GroundedEncoder
from trainables.semantic import EmbeddingTable

__all__ = ["Snapshot", "SnapshotEnsemble"]

Weights = dict[str, torch.Tensor]


@dataclass
class Snapshot:
    epoch: int
    score: float  # dev R@10 mean at that epoch
    state: Weights  # the model's weights, on the CPU
    # its test split's (image, caption) embeddings from its epoch's evaluation, which the
    # ensemble sums instead of embedding again (never checkpointed: a resumed run's
    # snapshots embed again)
    test: Embeddings | None = field(default=None, repr=False, compare=False)


class SnapshotEnsemble:
    """The best snapshots so far (``snapshots``, best first) and the battery embeddings
    of the epochs that may join them (module docstring)."""

    def __init__(self, config: OptimConfig) -> None:
        self.size = config.ensemble_size
        self.interval = config.snapshot_interval
        self.last = config.epochs
        self.snapshots: list[Snapshot] = []  # the best ``size`` snapshots so far
        # the battery sentences' embeddings (CPU) of epochs that may join the ensemble,
        # written by the battery (perhaps in the worker), read by ``metrics``
        self._tables: dict[int, torch.Tensor] = {}
        self._lock = threading.Lock()

    def due(self, epoch: int) -> bool:
        """Whether a snapshot is taken after ``epoch``."""
        return epoch > 0 and epoch % self.interval == 0

    def may_join(self, epoch: int) -> bool:
        """Whether the model of ``epoch`` may be one of the ensemble's: a snapshot epoch,
        or the last (the ensemble of a run without snapshots is its last model)."""
        return epoch == self.last or self.due(epoch)

    def keeper(self, epoch: int, ready: threading.Event) -> Callable[[EmbeddingTable], None] | None:
        """What keeps the battery table of ``epoch`` for the ensemble, setting ``ready``
        once it is kept (None: the epoch cannot join it)."""
        if not self.may_join(epoch):
            return None

        def keep(table: EmbeddingTable) -> None:
            with self._lock:
                self._tables[epoch] = table.vectors.cpu()
            ready.set()  # (only read while the worker runs this epoch)

        return keep

    def keep(
        self, epoch: int, score: float, model: GroundedEncoder, test: Embeddings | None
    ) -> None:
        """A snapshot of ``model`` after ``epoch`` (its dev ``score``, its ``test``
        split's embeddings); the best ``size`` snapshots stay."""
        state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        self.snapshots.append(Snapshot(epoch, score, state, test))
        self.snapshots.sort(key=lambda s: (-s.score, s.epoch))
        del self.snapshots[self.size :]
        kept = {s.epoch for s in self.snapshots} | {epoch}
        with self._lock:  # tables of snapshots dropped are not needed any more
            for dropped in [e for e in self._tables if e not in kept]:
                del self._tables[dropped]

    def metrics(
        self,
        evaluation: Evaluation,
        current: tuple[int, GroundedEncoder, Embeddings | None],
        build: Callable[[Weights], GroundedEncoder],
        worker: BatteryWorker,
    ) -> dict[str, float]:
        """The ensemble's test metrics under ``ensemble/`` (module docstring); the
        ``current`` epoch's model (its epoch, model and test embeddings) when no snapshot
        was taken. ``build`` makes a model of a snapshot's weights (only where its
        embeddings are not kept); ``worker`` may be embedding a member's battery now."""
        members: list[tuple[int, Embeddings | None, Weights | None]]
        members = [(s.epoch, s.test, s.state) for s in self.snapshots]
        if not members:
            members = [(current[0], current[2], None)]
        made: dict[int, GroundedEncoder] = {}

        def model(i: int) -> GroundedEncoder:  # built when first needed
            state = members[i][2]
            if i not in made:
                made[i] = current[1] if state is None else build(state)
            return made[i]

        metrics: dict[str, float] = {names.ENSEMBLE_SIZE: float(len(members))}
        for k, snap in enumerate(self.snapshots):
            metrics[names.ensemble_epoch(k + 1)] = float(snap.epoch)
        tests = [test for _, test, _ in members]
        if all(test is not None for test in tests):
            with torch.inference_mode():
                images = summed([test[0] for test in tests if test is not None])
                captions = summed([test[1] for test in tests if test is not None])
                values = retrieval_metrics(images, captions)
            metrics.update(keyed(names.ENSEMBLE, values))
        else:
            models = [model(i) for i in range(len(members))]
            split = evaluation.test_split
            metrics.update(evaluation.retrieval(split, models, names.ENSEMBLE)[0])
        if evaluation.semantic is not None:
            epochs = [epoch for epoch, _, _ in members]
            metrics.update(self._battery(evaluation, epochs, model, worker))
        return metrics

    def _battery(
        self,
        evaluation: Evaluation,
        epochs: Sequence[int],
        model: Callable[[int], GroundedEncoder],
        worker: BatteryWorker,
    ) -> dict[str, float]:
        """The ensemble's battery (``ensemble/``) from its members' battery tables: those
        kept at their epochs, the one the worker is embedding now (waited for, after the
        others are embedded here), and the rest embedded now."""
        assert evaluation.semantic is not None
        sentences = evaluation.semantic.test.sentences
        if not sentences:
            return {}
        running = worker.epoch if worker.busy else None
        vectors: dict[int, torch.Tensor] = {}
        for wait in (False, True):
            for i, epoch in enumerate(epochs):
                if wait != (epoch == running) or i in vectors:
                    continue
                if wait:
                    worker.table_ready.wait()
                with self._lock:
                    kept = self._tables.get(epoch)
                if kept is None:
                    with torch.inference_mode():
                        kept = evaluation.embed_fn([model(i)])(sentences).cpu()
                vectors[i] = kept
        ordered = [vectors[i] for i in range(len(epochs))]
        return evaluation.battery_of_sum(ordered, names.ENSEMBLE)
