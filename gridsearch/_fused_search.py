"""A fused search (``--fuse K``): configurations of one shape trained as one Tune trial.

``FusedSearcher`` sits between Tune and the Optuna searcher
(``_optuna.ResumableOptunaSearch``). Asked for a trial, it asks Optuna for up to ``K``
configurations and groups those whose shapes agree (``trainables.SHARED_FIELDS``: the
fused model stacks their weights); a configuration of another shape waits for the next
trial (the oldest waiting one decides that trial's shape), one the fused path cannot
train (``trainables.check_fusable``) trains alone. The Tune trial's config holds the
members (``trainables.tune.MEMBERS``) and ``trainables.tune.fused_trainable`` trains
them; its result per epoch holds each member under ``trainables.tune.member_key``.

Each member stays its own Optuna trial, told under the member's own id
(``member_id``: the Tune trial id and ``-m<position>``, which is also its MLflow run's
``tune.trial_id`` tag): its intermediate values at step = epoch, its value when it ends.
Early stopping is per member: the search's scheduler (ASHA at cycle ends, or its
Pareto form) gets every member's report as if the member were a trial of its own, and a
member it stops leaves its group: the searcher writes its position and epoch into the
trial's ``trainables.tune.stop_file``, which the trial reads after the report (Tune hands
the report to the searcher before the trial goes on). Tune itself then runs FIFO. A
``--resume`` starts with an empty ``progress_dir``: the restored searcher writes its
stop files again before any trial runs, so a member stopped before the interruption
stays stopped at its epoch however old the checkpoint its trial resumes from.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import ConcurrencyLimiter, Searcher

from gridsearch._optuna import ResumableOptunaSearch
from gridsearch.tracking import split_trial_config
from storage import write_text_atomic
from trainables import names
from trainables.config import ConfigError
from trainables.fused import SHARED_FIELDS, check_fusable
from trainables.seeds import member_folder
from trainables.tune import MEMBERS, member_key, member_metrics, stop_file

__all__ = [
    "FusedSearcher",
    "Member",
    "MemberResults",
    "configurations_of",
    "fused_search",
    "is_fused",
    "member_checkpoint",
    "member_id",
    "members_of",
    "shape_of",
    "tune_trial_of",
]

ASKS_PER_MEMBER = 2  # draws a trial may take to fill its group before it starts smaller


def member_id(trial_id: str, member: int) -> str:
    """The id a member of the fused trial ``trial_id`` goes by in Optuna and MLflow."""
    return f"{trial_id}-m{member}"


def is_fused(config: Any) -> bool:
    """Whether a Tune trial's config is a fused trial's (holds ``MEMBERS``)."""
    return isinstance(config, dict) and isinstance(config.get(MEMBERS), list)


def configurations_of(config: Any) -> int:
    """How many configurations a Tune trial's config trains: a fused trial's members,
    else one (what a search's ``num_samples`` counts)."""
    return len(config[MEMBERS]) if is_fused(config) else 1


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
class Member:
    """A member of a fused trial as MLflow and Optuna see it: a trial of its own."""

    trial_id: str  # ``member_id``
    position: int  # in the fused trial's ``MEMBERS``
    config: dict[str, Any]  # its config, as a lone trial's


def members_of(trial_id: str, config: Any) -> list[Member]:
    """The members of the Tune trial ``trial_id`` (none when it is not a fused trial)."""
    if not is_fused(config):
        return []
    return [
        Member(member_id(trial_id, position), position, dict(member))
        for position, member in enumerate(config[MEMBERS])
    ]


class _MemberCheckpoint:
    """Member ``position``'s part of a fused trial's Tune checkpoint, read as a lone
    trial's checkpoint is (``as_directory``)."""

    def __init__(self, checkpoint: Any, position: int) -> None:
        self.checkpoint, self.position = checkpoint, position

    @contextmanager
    def as_directory(self) -> Iterator[str]:
        with self.checkpoint.as_directory() as folder:
            yield str(member_folder(Path(folder), self.position))


def member_checkpoint(checkpoint: Any, position: int) -> Any:
    """Member ``position``'s checkpoint in a fused trial's ``checkpoint`` (None: none)."""
    return None if checkpoint is None else _MemberCheckpoint(checkpoint, position)


@dataclass(frozen=True)
class _MemberResult:
    """A member's part of a fused trial's Tune ``Result``, as a lone trial's reads."""

    metrics: dict[str, Any]  # its last report, with its ``trial_id``
    config: dict[str, Any]
    metrics_dataframe: Any  # its rows, its keys un-prefixed
    checkpoint: Any
    error: Any
    tune_trial_id: str  # the fused trial it is a member of


class MemberResults:
    """Tune's results with every fused trial replaced by its members, each read as a
    lone trial's result (``metrics``, ``config``, ``metrics_dataframe``, ``checkpoint``,
    ``error``), so the end of a search (MLflow reconciled, the summary, the best models
    registered) sees one trial per configuration. Other results pass as they are."""

    def __init__(self, results: Any) -> None:
        self.results = results
        self._items: list[Any] = []
        self.num_terminated = self.num_errors = 0
        listed = list(results)
        statuses = _statuses(results, len(listed))
        for result, status in zip(listed, statuses, strict=True):
            config = dict(result.config or {})
            trial_id = str((result.metrics or {}).get("trial_id", "?"))
            members = members_of(trial_id, config)
            expanded = [_member_result(result, m) for m in members] or [result]
            self._items.extend(expanded)
            if result.error is not None:
                self.num_errors += len(expanded)
            elif status == "TERMINATED":
                self.num_terminated += len(expanded)
        if len(self._items) == len(listed):  # no fused trial: Tune's own counts
            self.num_terminated = getattr(results, "num_terminated", self.num_terminated)
            self.num_errors = getattr(results, "num_errors", self.num_errors)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __getattr__(self, name: str) -> Any:  # anything else: Tune's own
        return getattr(self.__dict__["results"], name)


def _statuses(results: Any, count: int) -> list[str | None]:
    """Each result's trial status (``ResultGrid`` lists its results in its trials'
    order); None each where they cannot be read."""
    trials = getattr(getattr(results, "_experiment_analysis", None), "trials", None)
    if trials is None or len(trials) != count:
        return [None] * count
    return [str(trial.status) for trial in trials]


def tune_trial_of(result: Any) -> str:
    """The id of the Tune trial a result of ``MemberResults`` comes from: a member's
    fused trial's, else its own (``trial_id`` in its metrics)."""
    fused = getattr(result, "tune_trial_id", None)
    return str(fused) if fused is not None else str((result.metrics or {}).get("trial_id", "?"))


def _member_result(result: Any, member: Member) -> _MemberResult:
    """``result`` is Tune's ``Result``, or a trial read back from a saved experiment
    (``_extend.saved_results``: no table, no checkpoint)."""
    frame = getattr(result, "metrics_dataframe", None)
    rows = None
    if frame is not None:
        prefix = member_key(member.position, "")
        own = [c for c in frame.columns if str(c).startswith(prefix)]
        epoch = member_key(member.position, "epoch")
        if epoch in frame:
            rows = frame[frame[epoch].notna()][own].rename(columns=lambda c: str(c)[len(prefix) :])
    last: dict[str, Any] = {}
    if rows is not None and len(rows):
        last = {k: v for k, v in rows.iloc[-1].to_dict().items() if v == v}
    else:
        last = member_metrics(dict(result.metrics or {})).get(member.position, {})
    fused_trial = str((result.metrics or {}).get("trial_id", "?"))
    last["trial_id"] = member.trial_id
    checkpoint = member_checkpoint(getattr(result, "checkpoint", None), member.position)
    return _MemberResult(last, member.config, rows, checkpoint, result.error, fused_trial)


@dataclass(frozen=True)
class _Member:
    """A member as the scheduler sees a trial: by its id."""

    trial_id: str


class FusedSearcher(Searcher):
    """Groups Optuna's configurations into fused trials (module docstring). ``total``:
    configurations to train in all (the search's trials); ``scheduler``: the search's
    own, applied per member; ``stops``: the folder of the trials' stop files
    (``progress_dir``; None: no member is stopped early)."""

    def __init__(
        self,
        inner: ResumableOptunaSearch,
        fuse: int,
        total: int,
        scheduler: TrialScheduler | None = None,
        stops: str | Path | None = None,
    ) -> None:
        super().__init__(metric=inner.metric, mode=inner.mode)
        self.inner, self.fuse, self.total = inner, max(int(fuse), 1), int(total)
        self.scheduler = scheduler
        self.stops = str(stops) if stops is not None else None
        self.asked = 0  # configurations drawn from Optuna so far
        self.waiting: list[tuple[str, dict[str, Any]]] = []  # (drawn as, config)
        self.groups: dict[str, int] = {}  # trial id -> its number of members
        self.ended: set[str] = set()  # member ids whose Optuna trial was told its end
        self.last: dict[str, dict[str, Any]] = {}  # member id -> its last report
        # trial id -> its members stopped early: position -> the epoch it stopped after
        self.stopped: dict[str, dict[int, int]] = {}
        self.scheduled: set[str] = set()  # member ids the scheduler knows

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
            self.inner.rename(drawn_as, member_id(trial_id, position))
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
        stops: dict[int, int] = {}  # position -> the epoch it stops after
        for position, metrics in sorted(member_metrics(result).items()):
            member = member_id(trial_id, position)
            if member in self.ended:
                continue
            self.last[member] = metrics
            self.inner.on_trial_result(member, metrics)
            if names.is_finished(metrics):  # its epochs are done: it left the group
                self._end(member, metrics)
            elif self._stops(member, metrics):
                stops[position] = int(metrics["epoch"])
                self._end(member, metrics)
        if stops:
            self.stopped.setdefault(trial_id, {}).update(stops)
            self._write_stops(trial_id)

    def _write_stops(self, trial_id: str) -> None:
        """The trial's stop file: every member stopped so far, with its epoch."""
        if self.stops is None:
            return
        path = stop_file(self.stops, trial_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        stopped = sorted(self.stopped[trial_id].items())
        write_text_atomic(path, json.dumps({str(m): epoch for m, epoch in stopped}))

    def _stops(self, member: str, metrics: dict[str, Any]) -> bool:
        """Whether the search's scheduler stops ``member`` at this report."""
        if self.scheduler is None or self.stops is None:
            return False
        if "epoch" not in metrics:
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
        self.stopped.pop(trial_id, None)  # it runs no more: its stop file is not needed
        for position in range(self.groups.get(trial_id, 0)):
            member = member_id(trial_id, position)
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
        grouping's state too: this module never reads a pickle itself."""
        self.inner.__dict__[_STATE] = {k: v for k, v in self.__dict__.items() if k != "inner"}
        try:
            self.inner.save(checkpoint_path)
        finally:
            self.inner.__dict__.pop(_STATE, None)

    def restore(self, checkpoint_path: str) -> None:
        """The saved state, and the stop files of the trials that will run again (a
        resumed search's ``progress_dir`` starts empty; Tune restores its searcher
        before it restores a trial)."""
        self.inner.restore(checkpoint_path)
        own = self.inner.__dict__.pop(_STATE, None)
        if own is not None:
            self.__dict__.update(own)
        for trial_id in self.stopped:
            self._write_stops(trial_id)


_STATE = "_fused_searcher_state"  # the grouping's state inside the Optuna searcher's


def fused_search(
    searcher: ConcurrencyLimiter,
    scheduler: TrialScheduler,
    *,
    fuse: int,
    total: int,
    stops: str | Path | None,
) -> tuple[ConcurrencyLimiter, TrialScheduler]:
    """The searcher and scheduler Tune runs for a fused search: ``searcher`` (the
    search's Optuna searcher in its ``ConcurrencyLimiter``) wrapped by a
    ``FusedSearcher`` that applies ``scheduler`` per member, and FIFO for Tune."""
    inner = searcher.searcher
    assert isinstance(inner, ResumableOptunaSearch)
    metric, mode = inner.metric, inner.mode
    member_scheduler = scheduler if _stops_trials(scheduler) else None
    if member_scheduler is not None:
        member_scheduler.set_search_properties(_first(metric), _first(mode))
    wrapped = FusedSearcher(inner, fuse, total, member_scheduler, stops)
    return ConcurrencyLimiter(wrapped, max_concurrent=searcher.max_concurrent), FIFOScheduler()


def _stops_trials(scheduler: TrialScheduler) -> bool:
    """Whether ``scheduler`` may stop a trial early (anything but plain FIFO;
    ParetoHalving is a FIFOScheduler subclass that does)."""
    return type(scheduler) is not FIFOScheduler


def _first(value: str | Sequence[str] | None) -> str | None:
    return value[0] if isinstance(value, list | tuple) else value  # type: ignore[return-value]
