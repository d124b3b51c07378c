"""The test battery computed in place: the reference that the Trainer's one path, its
background worker (``trainables._battery``'s module docstring), is held to and timed
against. The Trainer computes an epoch's battery in a thread of its own, from a copy of
the epoch's weights, while the next epoch trains; here it is computed at once, in the
training thread (with its torch threads), from the model itself, and each battery
comes in its own epoch's report, with nothing running beside the training.

    trainer = in_place(Trainer(config, data, semantic))
    reports = list(trainer.run())       # every battery in its own epoch's report

tests/trainables/test_loop.py holds the worker's metrics to it; ``bench/bench_eval.py``
times the first path with it. Not part of the package: the Trainer has the worker only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from trainables.loop import Trainer
from trainables.model import GroundedEncoder

__all__ = ["InPlaceBattery", "evaluate_in_place", "in_place"]


class InPlaceBattery:
    """The background worker's interface (``start``, ``collect``, ``busy``,
    ``finished``, ``epoch``, ``table_ready``) with nothing in the background: ``start``
    computes the battery then and there, in the calling thread, from ``model`` itself,
    and ``collect`` hands it over. An error is raised from ``start``, as it was raised."""

    def __init__(self) -> None:
        self.epoch: int | None = None  # the epoch of the battery computed, until collected
        self.table_ready = threading.Event()
        self._result: dict[str, float] | None = None

    @property
    def busy(self) -> bool:
        return self.epoch is not None

    @property
    def finished(self) -> bool:
        return self.busy

    def start(
        self,
        epoch: int,
        model: GroundedEncoder,
        battery: Callable[[Sequence[GroundedEncoder]], dict[str, float]],
    ) -> None:
        if self.busy:
            raise RuntimeError(f"the battery of epoch {self.epoch} was not collected")
        self.table_ready.clear()
        try:
            self._result = battery([model])
        finally:
            self.table_ready.set()
        self.epoch = epoch

    def collect(self) -> tuple[int, dict[str, float]]:
        if self.epoch is None or self._result is None:
            raise RuntimeError("no battery was started")
        epoch, result = self.epoch, self._result
        self.epoch, self._result = None, None
        return epoch, result


def in_place(trainer: Trainer) -> Trainer:
    """``trainer``, its test battery computed in place (``InPlaceBattery`` in its
    worker's stead) and each battery in its own epoch's report (every epoch is one whose
    report holds its own battery: ``complete_at``)."""
    trainer.battery.worker = InPlaceBattery()  # type: ignore[assignment]  # the worker's interface
    trainer.complete_at = frozenset(range(trainer.config.epochs + 1))
    return trainer


def evaluate_in_place(trainer: Trainer, train_metrics: dict[str, float]) -> dict[str, float]:
    """``trainer.evaluate_epoch`` of an ``in_place`` trainer outside ``run``, with the
    epoch's battery (where due) in its metrics."""
    metrics = trainer.evaluate_epoch(train_metrics)
    if trainer.battery.worker.busy:
        metrics.update(trainer.battery.worker.collect()[1])
    return metrics
