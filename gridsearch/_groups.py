"""A search's trials as groups: a Tune trial trains the configurations its config holds
(``trainables.tune.MEMBERS``): one, or up to ``--fuse K`` of one shape.

``GroupSearcher`` sits between Tune and the Optuna searcher
(``_optuna.ResumableOptunaSearch``). Asked for a trial, it asks Optuna for up to ``K``
configurations and groups those whose shapes agree (``trainables.SHARED_FIELDS``: a fused
model stacks their weights); a configuration of another shape waits for the next trial
(the oldest waiting one decides that trial's shape), one the fused path cannot train
(``trainables.check_fusable``) trains alone. ``trainables.tune.trial`` trains the group;
its result per epoch holds each member under ``trainables.tune.member_key``.

Each member is a trial of its own for Optuna, MLflow, the progress display and the
summary, under its own id (``member_id``: a group of one, the Tune trial's id; else that
id and ``-m<position>``, which is also its MLflow run's ``tune.trial_id`` tag): its
intermediate values at step = epoch, its value when it ends. Early stopping is per member
and one way for all: the search's scheduler (ASHA at cycle ends, or its Pareto form) gets
every member's report as if the member were a trial, and a member it stops leaves its
group: the searcher tells the trial's ``trainables.tune.TrialSignals`` actor (through
Ray, so a trial on any node hears it), which the trial asks after the report (Tune hands
the report to the searcher before the trial goes on). Tune itself runs FIFO. A
``--resume`` has a new actor: the restored searcher tells it its stops again before any
trial runs, so a member stopped before the interruption stays stopped at its epoch
however old the checkpoint its trial resumes from. The members themselves, and their parts
of a trial's checkpoint and results, are ``gridsearch._members``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import ConcurrencyLimiter, Searcher

from gridsearch._members import member_id
from gridsearch._optuna import ResumableOptunaSearch
from gridsearch._space import split_trial_config
from trainables import names
from trainables.config import ConfigError
from trainables.fused import SHARED_FIELDS, check_fusable
from trainables.tune import MEMBERS, member_metrics

__all__ = ["GroupSearcher", "group_search", "shape_of"]

ASKS_PER_MEMBER = 2  # draws a trial may take to fill its group before it starts smaller


def shape_of(config: dict[str, Any]) -> tuple[Any, ...] | None:
    """What members of one fused trial must share: the config's ``SHARED_FIELDS``; None
    when the fused path cannot train it (it trains alone)."""
    train, _ = split_trial_config(config)
    try:
        check_fusable([train])
    except ConfigError:
        return None
    return tuple(getattr(train, name) for name in SHARED_FIELDS)


@dataclass(frozen=True)
class _Member:
    """A member as the scheduler sees a trial: by its id."""

    trial_id: str


class GroupSearcher(Searcher):
    """Groups Optuna's configurations into trials of up to ``fuse`` (module docstring).
    ``total``: configurations to train in all (the search's trials); ``scheduler``: the
    search's own, applied per member; ``signals``: the trials' ``TrialSignals`` actor,
    through which members are stopped (None: none is stopped early; never saved with the
    searcher: a resumed search sets its own)."""

    def __init__(
        self,
        inner: ResumableOptunaSearch,
        fuse: int,
        total: int,
        scheduler: TrialScheduler | None = None,
        signals: Any = None,
    ) -> None:
        super().__init__(metric=inner.metric, mode=inner.mode)
        self.inner, self.fuse, self.total = inner, max(int(fuse), 1), int(total)
        self.scheduler = scheduler
        self.signals = signals
        self.asked = 0  # configurations drawn from Optuna so far
        self.waiting: list[tuple[str, dict[str, Any]]] = []  # (drawn as, config)
        self.groups: dict[str, int] = {}  # trial id -> its number of members
        self.ended: set[str] = set()  # member ids whose Optuna trial was told its end
        self.last: dict[str, dict[str, Any]] = {}  # member id -> its last report
        # trial id -> its members stopped early: position -> the epoch it stopped after
        self.stopped: dict[str, dict[int, int]] = {}
        self.scheduled: set[str] = set()  # member ids the scheduler knows

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (Tune's ``tuner.pkl``) without the signals actor, which ends with its
        driver: a resumed search sets its own (``_extend.use_signals``)."""
        return {**self.__dict__, "signals": None}

    # -- what Tune asks -------------------------------------------------------------

    @property
    def reused(self) -> int:
        return self.inner.reused

    @property
    def redrawn(self) -> int:
        return self.inner.redrawn

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any
    ) -> bool:
        return bool(self.inner.set_search_properties(metric, mode, config, **spec))

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        if self.asked >= self.total and not self.waiting:
            return Searcher.FINISHED  # type: ignore[return-value]  # Tune's own sentinel
        members = self._group()
        if not members:
            return None
        for position, (drawn_as, _) in enumerate(members):
            self.inner.rename(drawn_as, member_id(trial_id, position, len(members)))
        self.groups[trial_id] = len(members)
        return {MEMBERS: [config for _, config in members]}

    def _group(self) -> list[tuple[str, dict[str, Any]]]:
        """The next trial's members: the oldest waiting configuration's shape, the
        waiting ones of that shape, then new draws (another shape waits)."""
        members: list[tuple[str, dict[str, Any]]] = []
        shape: tuple[Any, ...] | None = None
        if self.waiting:
            members.append(self.waiting.pop(0))
            shape = shape_of(members[0][1])
            if shape is None:
                return members  # the fused path cannot train it: alone
            for entry in list(self.waiting):
                if len(members) < self.fuse and shape_of(entry[1]) == shape:
                    self.waiting.remove(entry)
                    members.append(entry)
        draws = 0
        while (
            len(members) < self.fuse
            and self.asked < self.total
            and draws < ASKS_PER_MEMBER * self.fuse
        ):
            drawn_as = f"draw-{self.asked}"
            config = self.inner.suggest(drawn_as)
            if config is None:
                break
            self.asked += 1
            draws += 1
            drawn = shape_of(config)
            if not members:
                members.append((drawn_as, config))
                shape = drawn
                if shape is None:
                    break
            elif drawn is not None and drawn == shape:
                members.append((drawn_as, config))
            else:
                self.waiting.append((drawn_as, config))
        return members

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        size = self.groups.get(trial_id, 1)
        for position, metrics in sorted(member_metrics(result).items()):
            member = member_id(trial_id, position, size)
            if member in self.ended:
                continue
            self.last[member] = metrics
            self.inner.on_trial_result(member, metrics)
            if names.is_finished(metrics):  # its epochs are done: it left the group
                self._end(member, metrics)
            elif self._stops(member, metrics):
                self.stopped.setdefault(trial_id, {})[position] = int(metrics["epoch"])
                self._tell_stop(trial_id, position)
                self._end(member, metrics)

    def _tell_stop(self, trial_id: str, position: int) -> None:
        """Tell the trial (through its signals actor) that a member stops, and when."""
        if self.signals is not None:
            self.signals.stop.remote(trial_id, position, self.stopped[trial_id][position])

    def _stops(self, member: str, metrics: dict[str, Any]) -> bool:
        """Whether the search's scheduler stops ``member`` at this report."""
        if self.scheduler is None or self.signals is None or "epoch" not in metrics:
            return False
        seen = _Member(member)
        if member not in self.scheduled:
            self.scheduler.on_trial_add(None, seen)  # type: ignore[arg-type]
            self.scheduled.add(member)
        action = self.scheduler.on_trial_result(None, seen, metrics)  # type: ignore[arg-type]
        return bool(action == TrialScheduler.STOP)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        self.stopped.pop(trial_id, None)  # it runs no more: its stops are not needed
        if self.signals is not None:
            self.signals.forget.remote(trial_id)
        size = self.groups.get(trial_id, 0)
        for position in range(size):
            member = member_id(trial_id, position, size)
            if member not in self.ended:
                last = None if error else self.last.get(member)
                self._end(member, last, error=error)

    def extend(self, total: int) -> None:
        """Hand out up to ``total`` configurations in all (never fewer than before): a
        ``--resume`` with a larger ``--num-samples`` (``_extend.ExtendedSearch``, once
        Tune restored this searcher)."""
        self.total = max(self.total, int(total))

    def _end(self, member: str, metrics: dict[str, Any] | None, error: bool = False) -> None:
        self.ended.add(member)
        self.inner.on_trial_complete(member, metrics, error)

    # -- Tune's experiment checkpoints ----------------------------------------------

    def save(self, checkpoint_path: str) -> None:
        """The Optuna searcher's own checkpoint (Ray's format and code), holding the
        grouping's state too (not the signals actor: it ends with its driver): this module
        never reads a pickle itself."""
        kept = {k: v for k, v in self.__dict__.items() if k not in ("inner", "signals")}
        self.inner.__dict__[_STATE] = kept
        try:
            self.inner.save(checkpoint_path)
        finally:
            self.inner.__dict__.pop(_STATE, None)

    def restore(self, checkpoint_path: str) -> None:
        """The saved state, and the stops of the trials that will run again told to this
        driver's signals actor (Tune restores its searcher before it restores a trial)."""
        self.inner.restore(checkpoint_path)
        own = self.inner.__dict__.pop(_STATE, None)
        if own is not None:
            self.__dict__.update({k: v for k, v in own.items() if k != "signals"})
        for trial_id, stopped in self.stopped.items():
            for position in stopped:
                self._tell_stop(trial_id, position)


_STATE = "_fused_searcher_state"  # the grouping's state inside the Optuna searcher's


def group_search(
    searcher: ConcurrencyLimiter,
    scheduler: TrialScheduler,
    *,
    fuse: int,
    total: int,
    signals: Any,
) -> tuple[ConcurrencyLimiter, TrialScheduler]:
    """The searcher and scheduler Tune runs: ``searcher`` (the search's Optuna searcher
    in its ``ConcurrencyLimiter``) wrapped by a ``GroupSearcher`` that applies
    ``scheduler`` per member, and FIFO for Tune."""
    inner = searcher.searcher
    assert isinstance(inner, ResumableOptunaSearch)
    metric, mode = inner.metric, inner.mode
    # anything but plain FIFO may stop a trial early (ParetoHalving is a FIFOScheduler
    # subclass that does)
    member_scheduler = scheduler if type(scheduler) is not FIFOScheduler else None
    if member_scheduler is not None:
        member_scheduler.set_search_properties(_first(metric), _first(mode))
    wrapped = GroupSearcher(inner, fuse, total, member_scheduler, signals)
    return ConcurrencyLimiter(wrapped, max_concurrent=searcher.max_concurrent), FIFOScheduler()


def _first(value: str | Sequence[str] | None) -> str | None:
    return value[0] if isinstance(value, list | tuple) else value  # type: ignore[return-value]
