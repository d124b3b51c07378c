"""One configuration trained at several seeds side by side, reported as their mean.

A search that compares configurations on one training seed compares their luck too: on
the recorded benchmark (BENCHMARKS.md, "Search strategies on a recorded problem") only
1-2 of 80 configurations are within 1% of a seed's best, and neither seed's best is
within 1% at the other. So a trial may train its configuration at ``k`` seeds (the
trial's ``seed``, ``seed + 1``, ..., ``seed + k - 1``), epoch by epoch in lockstep, and
report every metric's **mean** over them (what the search, ASHA and the best-trial
choice then select on) and, for the objectives and the headline test numbers, their
**spread** (the sample standard deviation over the seeds, under ``names.spread(key)``).

**Fused.** The seeds of one configuration share every shape, so when the fused path
takes the configuration (``trainables.fused.check_fusable``: the RNN families with the
hinge loss) they train as *one* fused model (``trainables._fused_seeds``): the k seeds'
weights stacked, one batched step for all of them, each seed still with its own
initialisation, batch order, loss, clipping and Adam, so each trains as it would alone
(to rounding: ``tests/tolerances.py``, ``FUSED_TRAINING``). Each seed keeps its own
``Trainer`` for everything but the training step (evaluation, test battery, snapshots,
ensemble, checkpoint in the lone format), so the reports are the same either way.
Otherwise (or with ``fused=False``, or ``GROUNDED_FUSED_SEEDS=sequential`` in the
environment) the seeds train one after the other, costing ``k`` times the training of
one; the log says once why they were not fused.

What is not averaged: ``time/...`` is summed (the trial's cost), and the snapshot
ensemble's description (``ensemble/size``, ``ensemble/epoch_<k>``) and the training
state the trial's model artifact is built from are the first seed's: the trial's model
is the one trained at its own ``seed``; the others only sharpen the estimate of how good
its configuration is.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import statistics
from collections.abc import Collection, Generator, Iterator, Sequence
from pathlib import Path
from typing import cast

from storage import write_text_atomic
from storage.senteval import SemanticBenchmark, load_senteval
from trainables import names
from trainables._fused_seeds import FusedSeeds, fused_members
from trainables.checkpoint import TRAINER_FILE
from trainables.config import ConfigError, TrainConfig
from trainables.data import TrainingData
from trainables.device import resolve_device
from trainables.fused import check_fusable
from trainables.loop import Trainer
from trainables.semantic import make_semantic

__all__ = [
    "FUSED_SEEDS_ENV",
    "FUSED_SEEDS_MODES",
    "GROUP_FILE",
    "SPREAD_KEYS",
    "MemberGroup",
    "SeedGroup",
    "combine",
    "fused_seeds_mode",
    "member_folder",
    "state_file",
]

_log = logging.getLogger(__name__)

# How a SeedGroup trains its seeds unless told (``fused``): "auto" (fused when they can
# be), "fused" (refuse a configuration that cannot be) or "sequential", read when the
# group is made (so it reaches a search's trials through their environment).
FUSED_SEEDS_ENV = "GROUNDED_FUSED_SEEDS"
FUSED_SEEDS_MODES = ("auto", "fused", "sequential")
# in a MemberGroup's checkpoint folder: the members stopped early (they resume stopped)
GROUP_FILE = "group.json"

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
    """``k`` trainers of one configuration at seeds ``config.seed + i``, stepped together:
    as one fused model when they can be (module docstring), else one after the other."""

    def __init__(
        self,
        config: TrainConfig,
        data: TrainingData,
        senteval: str | SemanticBenchmark | None,
        k: int = 1,
        *,
        complete_at: Collection[int] = (),
        fused: bool | None = None,
    ) -> None:
        """``complete_at``: see ``Trainer`` (epochs whose reports hold their own test
        battery: where a scheduler may stop the trial). ``fused``: True trains the seeds
        as one fused model (a ``ConfigError`` when the configuration cannot be fused),
        False one after the other, None (auto) as ``FUSED_SEEDS_ENV`` says (default: fused
        from two seeds on, when the configuration can be; else one after the other, saying
        why once in the log)."""
        if k < 1:
            raise ValueError(f"seeds per config: got {k}, expected at least 1")
        if isinstance(senteval, str) and k > 1 and config.semantic_every:
            senteval = load_senteval(senteval)  # read once, not once per seed
        configs = [dataclasses.replace(config, seed=config.seed + i) for i in range(k)]
        semantics = [make_semantic(senteval, seeded.evaluation, seeded.run) for seeded in configs]
        self._fused: FusedSeeds | None = None
        self.trainers: Sequence[Trainer]
        if _fuse(configs, fused):
            self._fused = fused_members(configs, data, semantics, complete_at)
            self.trainers = self._fused.trainers
        else:
            self.trainers = [
                Trainer(seeded, data, semantic, complete_at=complete_at)
                for seeded, semantic in zip(configs, semantics, strict=True)
            ]

    @property
    def fused(self) -> bool:
        """Whether the seeds train as one fused model (now: a group may fall back)."""
        return self._fused is not None and self._fused.reason is None

    def run(self) -> Iterator[dict[str, float]]:
        """Every epoch's combined report (see :func:`combine`), as ``Trainer.run``'s."""
        for reports in zip(*(t.run() for t in self.trainers), strict=True):
            yield combine(reports)

    def progress(self) -> tuple[int, float]:
        """The epoch being trained (1-based) and the fraction of its steps done, over all
        the seeds (one after the other, or fused: together)."""
        if self._fused is not None and self._fused.synced and self.fused:
            trainer = self._fused.fused
            per_epoch = trainer.steps_per_epoch
            epoch, done = trainer.epoch, trainer.step - trainer.epoch * per_epoch
        else:
            per_epoch = self.trainers[0].steps_per_epoch * len(self.trainers)
            epoch = min(t.epoch for t in self.trainers)
            done = sum(t.step for t in self.trainers) - epoch * per_epoch
        return epoch + 1, min(max(done / max(per_epoch, 1), 0.0), 1.0)

    def save(self, folder: Path) -> None:
        """Every seed's training state, as a lone ``Trainer`` checkpoints it
        (``state_file``): a fused group's as well, so either way resumes either way."""
        if self._fused is not None:
            self._fused.push()
        for i, trainer in enumerate(self.trainers):
            (folder / state_file(i)).write_bytes(trainer.save_checkpoint())

    def load(self, folder: Path) -> None:
        for i, trainer in enumerate(self.trainers):
            trainer.load_checkpoint(folder / state_file(i))
        if self._fused is not None:
            self._fused.invalidate()


class MemberGroup:
    """The configurations ``configs`` of one fused search trial, each at ``seeds`` seeds,
    trained together epoch by epoch (``trainables.tune.fused_trainable``): as one fused
    model when they can be (every configuration's seeds in it; the same ``FusedGroup``
    as ``SeedGroup``'s, so each member trains exactly as it would alone), else one after
    the other. A member (a configuration with its seeds) leaves the group when its epochs
    are done or when ``stop`` takes it out (early stopping); the others train on. Each
    epoch's report holds every member still training, by its position in ``configs``,
    as ``SeedGroup.run`` reports it (the mean over its seeds)."""

    def __init__(
        self,
        configs: Sequence[TrainConfig],
        data: TrainingData,
        senteval: str | SemanticBenchmark | None,
        seeds: int = 1,
        *,
        complete_at: Collection[int] = (),
        fused: bool | None = None,
    ) -> None:
        """``fused``: True refuses configurations that cannot be fused
        (``ConfigError``), False trains one after the other, None fuses when they can
        be, on any device (a fused search asked for it), unless ``FUSED_SEEDS_ENV`` says
        "sequential"; the log says once why not."""
        if not configs or seeds < 1:
            raise ValueError(f"a member group: got {len(configs)} configs at {seeds} seeds")
        seats = [
            dataclasses.replace(config, seed=config.seed + i)
            for config in configs
            for i in range(seeds)
        ]
        if isinstance(senteval, str) and len(seats) > 1 and any(c.semantic_every for c in seats):
            senteval = load_senteval(senteval)  # read once, not once per member
        semantics = [make_semantic(senteval, seat.evaluation, seat.run) for seat in seats]
        self.configs, self.seeds = list(configs), seeds
        self._fused: FusedSeeds | None = None
        self.trainers: Sequence[Trainer]
        if _fuse(seats, fused, "the {k} members of the fused trial", any_device=True):
            self._fused = fused_members(seats, data, semantics, complete_at)
            self.trainers = self._fused.trainers
        else:
            self.trainers = [
                Trainer(seat, data, semantic, complete_at=complete_at)
                for seat, semantic in zip(seats, semantics, strict=True)
            ]
        self.stopped: set[int] = set()  # members taken out by ``stop``
        self.running: set[int] = set(range(len(configs)))  # members still training
        # seat -> its Trainer's run (a generator: closed when its member leaves)
        self._runs: dict[int, Generator[dict[str, float], None, None]] = {}

    @property
    def fused(self) -> bool:
        """Whether the members train as one fused model (now: a group may fall back)."""
        return self._fused is not None and self._fused.reason is None

    def _seats(self, member: int) -> range:
        return range(member * self.seeds, (member + 1) * self.seeds)

    def _done(self, member: int) -> bool:
        return all(
            len(self.trainers[s].history) > self.trainers[s].config.epochs
            for s in self._seats(member)
        )

    def run(self) -> Iterator[dict[int, dict[str, float]]]:
        """Every epoch, the report of every member still training (see the class)."""
        self._runs = {
            seat: cast(Generator[dict[str, float], None, None], self.trainers[seat].run())
            for member in sorted(self.running)
            for seat in self._seats(member)
        }
        try:
            while True:
                for member in sorted(self.running):
                    if self._done(member):
                        self._leave(member)
                if not self.running:
                    return
                reports = {}
                for member in sorted(self.running):
                    seats = [next(self._runs[s]) for s in self._seats(member)]
                    reports[member] = combine(seats)
                yield reports
        finally:
            for run in self._runs.values():
                run.close()

    def reported(self, member: int) -> int:
        """The last epoch ``member`` reported (-1: none yet; its seats go in lockstep)."""
        return min(len(self.trainers[seat].history) for seat in self._seats(member)) - 1

    def stop(self, member: int) -> None:
        """Take ``member`` out of the group (early stopping): it trains no more, its
        training state stays as it is (``save`` keeps it); the others go on."""
        if member in self.running:
            self.stopped.add(member)
            self._leave(member)

    def _leave(self, member: int) -> None:
        self.running.discard(member)
        for seat in self._seats(member):
            run = self._runs.pop(seat, None)
            if run is not None:
                run.close()  # its Trainer settles its background battery
            if self._fused is not None:
                self._fused.stop(seat)

    def progress(self) -> tuple[int, float]:
        """The epoch being trained (1-based) and the fraction of its steps done, over
        the members still training."""
        live = [t for i, t in enumerate(self.trainers) if i // self.seeds in self.running]
        live = live or list(self.trainers)
        if self._fused is not None and self._fused.synced and self.fused:
            trainer = self._fused.fused
            per_epoch = trainer.steps_per_epoch
            epoch, done = trainer.epoch, trainer.step - trainer.epoch * per_epoch
        else:
            per_epoch = live[0].steps_per_epoch * len(live)
            epoch = min(t.epoch for t in live)
            done = sum(t.step for t in live) - epoch * per_epoch
        return epoch + 1, min(max(done / max(per_epoch, 1), 0.0), 1.0)

    def save(self, folder: Path) -> None:
        """Every member's training state in ``member_folder(folder, i)``, each seed's as
        a lone trial's (``state_file``), and which members were stopped (``GROUP_FILE``)."""
        if self._fused is not None:
            self._fused.push()
        for member in range(len(self.configs)):
            place = member_folder(folder, member)
            place.mkdir(parents=True, exist_ok=True)
            for i, seat in enumerate(self._seats(member)):
                (place / state_file(i)).write_bytes(self.trainers[seat].save_checkpoint())
        stopped = {"stopped": sorted(self.stopped)}
        write_text_atomic(folder / GROUP_FILE, json.dumps(stopped))

    def load(self, folder: Path) -> None:
        """Continue from ``save``'s folder: stopped members stay stopped."""
        for member in range(len(self.configs)):
            for i, seat in enumerate(self._seats(member)):
                path = member_folder(folder, member) / state_file(i)
                self.trainers[seat].load_checkpoint(path)
        group = folder / GROUP_FILE
        stopped = json.loads(group.read_text(encoding="utf-8"))["stopped"] if group.exists() else []
        if self._fused is not None:
            self._fused.invalidate()
        for member in stopped:
            self.stop(int(member))


def member_folder(folder: Path, member: int) -> Path:
    """Where a ``MemberGroup`` checkpoint keeps member ``member``'s training state."""
    return folder / f"member-{member}"


def fused_seeds_mode() -> str:
    """``FUSED_SEEDS_ENV`` of the environment: "auto" (default), "fused" or "sequential"."""
    mode = os.environ.get(FUSED_SEEDS_ENV) or "auto"
    if mode not in FUSED_SEEDS_MODES:
        raise ValueError(
            f"{FUSED_SEEDS_ENV}: got {mode!r}, expected one of {', '.join(FUSED_SEEDS_MODES)}"
        )
    return mode


def _fuse(
    configs: Sequence[TrainConfig],
    fused: bool | None,
    what: str = "seeds per config: the {k} seeds",
    any_device: bool = False,
) -> bool:
    """Whether ``configs`` (one configuration's seeds; ``any_device``: the members of a
    fused search trial, which asked for fusing on whatever device) train as one fused
    model. ``what``: how the log names them when they cannot."""
    if fused is False:
        return False
    strict = fused is True
    if fused is None:
        mode = fused_seeds_mode()
        if mode == "sequential" or (mode == "auto" and len(configs) < 2):
            return False
        on_gpu = resolve_device(configs[0].device).type == "cuda"
        if mode == "auto" and not (on_gpu or any_device):
            return False  # fusing pays where the step is launch-bound; a CPU is slower fused
        strict = mode == "fused"
    try:
        check_fusable(configs)
    except ConfigError as err:
        if strict:
            raise
        _log.warning(
            "%s train one after the other, not fused: %s", what.format(k=len(configs)), err
        )
        return False
    return True
