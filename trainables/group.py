"""A trial's group: its configurations (one, or several of one shape in a fused search),
each trained at ``seeds`` seeds, epoch by epoch in lockstep. A lone trial is a group of
one configuration; there is no other path.

    group = TrialGroup([config], data, senteval, seeds=2)
    for reports in group.run():          # epoch 0 (untrained), 1, 2, ...
        metrics = reports[0]             # member 0: the mean over its seeds
        group.stop(0)                    # early stopping: a member leaves, the rest go on

**Seeds.** A search that compares configurations on one training seed compares their luck
too: on the recorded benchmark (BENCHMARKS.md, "Search strategies on a recorded problem")
only 1-2 of 80 configurations are within 1% of a seed's best, and neither seed's best is
within 1% at the other. So a member may train at ``seeds`` seeds (its ``seed``, ``seed +
1``, ...) and report every metric's **mean** over them (what the search, ASHA and the best
trial's choice select on) and, for the objectives and the headline test numbers, their
**spread** (the sample standard deviation, ``names.spread(key)``). ``time/...`` is summed
(the member's cost); the snapshot ensemble's description and the training state the
trial's model is built from are the first seed's: the member's model is the one trained
at its own ``seed``; the others only sharpen the estimate.

**The engine** (``RunConfig.engine``, recorded with the run): the group's seats (every
configuration at every seed) train either one after the other (each its own ``Trainer``)
or as one fused model (``trainables._fused_group``: the seats' weights stacked, one batched
step for all, each seat still with its own initialisation, batch order, loss, clipping
and Adam, so each trains as it would alone, to rounding: ``tests/tolerances.py``,
``FUSED_TRAINING``). "auto" fuses two seats or more where it pays (on a GPU, where the
step is launch-bound) or where a trial holds several configurations (a fused search asked
for it); "fused" insists (a ``ConfigError`` when the configuration cannot be:
``trainables.fused.check_fusable``); "sequential" never fuses. Evaluation, the test
battery, snapshots, the ensemble and the checkpoint are each seat's ``Trainer``'s either
way, so the reports are the same.

**Checkpoints.** ``save`` writes each member's seats in ``member_folder(folder, i)`` in
the lone ``Trainer``'s format (``state_file``), and which members were stopped
(``GROUP_FILE``); a group of one also loads the earlier flat layout (its seats'
``state_file`` in the folder itself).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import statistics
from collections.abc import Collection, Generator, Iterator, Sequence
from pathlib import Path
from typing import cast

from storage import write_text_atomic
from storage.senteval import SemanticBenchmark, load_senteval
from trainables import names
from trainables._fused_group import FusedGroup
from trainables.checkpoint import TRAINER_FILE
from trainables.config import ConfigError, TrainConfig
from trainables.data import TrainingData
from trainables.device import resolve_device
from trainables.fused import check_fusable
from trainables.loop import Trainer
from trainables.semantic import make_semantic

__all__ = [
    "GROUP_FILE",
    "SPREAD_KEYS",
    "TrialGroup",
    "combine",
    "member_folder",
    "state_file",
]

_log = logging.getLogger(__name__)

# in a group's checkpoint folder: the members stopped early (they resume stopped)
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
        # an earlier epoch's metrics carried late (trainables._battery) combine as their own
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
    """The file of a member's ``index``-th seed's training state in its folder: the first
    seed's is ``TRAINER_FILE``, as a lone ``Trainer``'s checkpoint is."""
    return TRAINER_FILE if index == 0 else f"trainer-seed+{index}.pt"


def member_folder(folder: Path, member: int) -> Path:
    """Where a group's checkpoint keeps member ``member``'s training state."""
    return folder / f"member-{member}"


class TrialGroup:
    """The configurations ``configs`` of one trial, each at ``seeds`` seeds, trained
    together epoch by epoch (module docstring). A member (a configuration with its seeds)
    leaves the group when its epochs are done or when ``stop`` takes it out (early
    stopping); the others train on. Each epoch's report holds every member still training,
    by its position in ``configs``, as the mean over its seeds (``combine``)."""

    def __init__(
        self,
        configs: Sequence[TrainConfig],
        data: TrainingData,
        senteval: str | SemanticBenchmark | None,
        seeds: int = 1,
        *,
        complete_at: Collection[int] = (),
    ) -> None:
        """``complete_at``: see ``Trainer`` (epochs whose reports hold their own test
        battery: where a scheduler may stop the trial)."""
        if not configs or seeds < 1:
            raise ValueError(f"a trial group: got {len(configs)} configs at {seeds} seeds")
        seats = [
            dataclasses.replace(config, seed=config.seed + i)
            for config in configs
            for i in range(seeds)
        ]
        if isinstance(senteval, str) and len(seats) > 1 and any(c.semantic_every for c in seats):
            senteval = load_senteval(senteval)  # read once, not once per seat
        semantics = [make_semantic(senteval, seat.evaluation, seat.run) for seat in seats]
        self.configs, self.seeds = list(configs), seeds
        self._fused: FusedGroup | None = None
        self.trainers: Sequence[Trainer]
        if _fuse(seats, several=len(configs) > 1):
            self._fused = FusedGroup(seats, data, semantics, complete_at)
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
        """Whether the seats train as one fused model (now: a group may fall back)."""
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
        """The epoch being trained (1-based) and the fraction of its steps done, over the
        members still training (one after the other, or fused: together)."""
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
        """Every member's training state in ``member_folder(folder, i)``, each seed's as a
        lone ``Trainer`` checkpoints it (``state_file``), and which members were stopped
        (``GROUP_FILE``): written fused or not, it resumes either way."""
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
        """Continue from ``save``'s folder (a group of one: also from the earlier flat
        layout); stopped members stay stopped."""
        flat = len(self.configs) == 1 and not member_folder(folder, 0).is_dir()
        for member in range(len(self.configs)):
            place = folder if flat else member_folder(folder, member)
            for i, seat in enumerate(self._seats(member)):
                self.trainers[seat].load_checkpoint(place / state_file(i))
        group = folder / GROUP_FILE
        stopped = json.loads(group.read_text(encoding="utf-8"))["stopped"] if group.exists() else []
        if self._fused is not None:
            self._fused.invalidate()
        for member in stopped:
            self.stop(int(member))


def _fuse(seats: Sequence[TrainConfig], several: bool) -> bool:
    """Whether ``seats`` (a group's configurations at their seeds; ``several``: more than
    one configuration) train as one fused model, as their ``engine`` says (module
    docstring). Where "auto" cannot fuse two seats or more, the log says why once."""
    engine = seats[0].engine
    if engine == "sequential" or len(seats) < 2:  # one model: nothing to fuse
        return False
    if engine == "auto" and not (several or resolve_device(seats[0].device).type == "cuda"):
        return False  # fusing pays where the step is launch-bound; a CPU is slower fused
    try:
        check_fusable(seats)
    except ConfigError as err:
        if engine == "fused":
            raise
        _log.warning("the %d seats of the trial train one after the other, not fused: %s",
                     len(seats), err)  # fmt: skip
        return False
    return True
