"""One configuration trained at several seeds side by side, reported as their mean.

A search that compares configurations on one training seed compares their luck too: on
the recorded benchmark (BENCHMARKS.md, "Search strategies on a recorded problem") only
1-2 of 80 configurations are within 1% of a seed's best, and neither seed's best is
within 1% at the other. So a trial may train its configuration at ``k`` seeds (the
trial's ``seed``, ``seed + 1``, ..., ``seed + k - 1``), epoch by epoch in lockstep, and
report every metric's **mean** over them (what the search, ASHA and the best-trial
choice then select on) and, for the objectives and the headline test numbers, their
**spread** (the sample standard deviation over the seeds, under ``names.spread(key)``).
It costs ``k`` times the training of one.

What is not averaged: ``time/...`` is summed (the trial's cost), and the snapshot
ensemble's description (``ensemble/size``, ``ensemble/epoch_<k>``) and the training
state the trial's model artifact is built from are the first seed's: the trial's model
is the one trained at its own ``seed``; the others only sharpen the estimate of how good
its configuration is.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

from storage.senteval import SemanticBenchmark, load_senteval
from trainables import names
from trainables.checkpoint import TRAINER_FILE
from trainables.config import TrainConfig
from trainables.data import TrainingData
from trainables.loop import Trainer
from trainables.semantic import make_semantic

__all__ = ["SPREAD_KEYS", "SeedGroup", "combine", "state_file"]

# The metrics whose spread over seeds is reported beside their mean.
SPREAD_KEYS = (
    names.PRIMARY_RETRIEVAL,
    names.PRIMARY_SEMANTIC,
    names.BEST_RETRIEVAL,
    names.BEST_SEMANTIC,
    names.key(names.TEST, "r10_mean"),
    names.key(names.TEST, "semantic"),
    names.FINISHED,
    names.key(names.ENSEMBLE, "semantic"),
)


def _first_seeds(key: str) -> bool:
    """Keys that describe the first seed's ensemble rather than measure a model."""
    return key == names.ENSEMBLE_SIZE or key.startswith(f"{names.ENSEMBLE}/epoch_")


def combine(reports: Sequence[dict[str, float]]) -> dict[str, float]:
    """One epoch's report from the same epoch's reports of the seeds: the mean of every
    metric, the sum of ``time/...``, the first seed's ensemble description, and the spread
    of ``SPREAD_KEYS`` (with two seeds or more). A key that not every seed reported is
    left out (a metric one seed could not compute has no mean)."""
    if not reports:
        raise ValueError("combine: no reports")
    if len({r.get("epoch") for r in reports}) != 1:
        raise ValueError(f"combine: the seeds' epochs differ: {[r.get('epoch') for r in reports]}")
    if len(reports) == 1:
        return dict(reports[0])
    out: dict[str, float] = {}
    for key in reports[0]:
        if not all(key in r for r in reports):
            continue
        values = [float(r[key]) for r in reports]
        # an earlier epoch's metrics carried late (trainables.loop) combine as their own
        own = key.removeprefix(f"{names.LATE}/")
        if key in ("epoch", names.LATE_EPOCH) or _first_seeds(own):
            out[key] = reports[0][key]
        elif own.startswith("time/"):
            out[key] = math.fsum(values)
        else:
            out[key] = math.fsum(values) / len(values)
            if own in SPREAD_KEYS and not any(math.isnan(v) for v in values):
                spread = names.spread(own)
                out[names.late(spread) if own != key else spread] = statistics.stdev(values)
    return out


def state_file(index: int) -> str:
    """The file of the ``index``-th seed's training state in a checkpoint folder: the
    first seed's is ``TRAINER_FILE``, as a single-seed trial's is."""
    return TRAINER_FILE if index == 0 else f"trainer-seed+{index}.pt"


class SeedGroup:
    """``k`` trainers of one configuration at seeds ``config.seed + i``, stepped together."""

    def __init__(
        self,
        config: TrainConfig,
        data: TrainingData,
        senteval: str | SemanticBenchmark | None,
        k: int = 1,
        *,
        complete_at: Collection[int] = (),
    ) -> None:
        """``complete_at``: see ``Trainer`` (epochs whose reports hold their own test
        battery: where a scheduler may stop the trial)."""
        if k < 1:
            raise ValueError(f"seeds per config: got {k}, expected at least 1")
        if isinstance(senteval, str) and k > 1 and config.semantic_every:
            senteval = load_senteval(senteval)  # read once, not once per seed
        self.trainers = []
        for i in range(k):
            seeded = dataclasses.replace(config, seed=config.seed + i)
            semantic = make_semantic(senteval, seeded)
            self.trainers.append(Trainer(seeded, data, semantic, complete_at=complete_at))

    def run(self) -> Iterator[dict[str, float]]:
        """Every epoch's combined report (see :func:`combine`), as ``Trainer.run``'s."""
        for reports in zip(*(t.run() for t in self.trainers), strict=True):
            yield combine(reports)

    def save(self, folder: Path) -> None:
        for i, trainer in enumerate(self.trainers):
            (folder / state_file(i)).write_bytes(trainer.save_checkpoint())

    def load(self, folder: Path) -> None:
        for i, trainer in enumerate(self.trainers):
            trainer.load_checkpoint(folder / state_file(i))
