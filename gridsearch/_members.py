"""A Tune trial's members, each a trial of its own for Optuna, MLflow, the progress display
and the summary (``gridsearch._groups`` groups them): their ids (``member_id``), their
configurations (``members_of``), and each member's part of its trial's checkpoint and of
Tune's results (``member_checkpoint``, ``MemberResults``), read as a lone trial's."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainables.group import member_folder
from trainables.tune import group_configs, member_key, member_metrics

__all__ = [
    "Member",
    "MemberResults",
    "configurations_of",
    "member_checkpoint",
    "member_id",
    "members_of",
    "tune_trial_of",
]


def member_id(trial_id: str, member: int, size: int) -> str:
    """The id member ``member`` of the Tune trial ``trial_id`` (a group of ``size``) goes
    by in Optuna and MLflow: the trial's own in a group of one."""
    return trial_id if size == 1 else f"{trial_id}-m{member}"


def configurations_of(config: Any) -> int:
    """How many configurations a Tune trial's config trains (what a search's
    ``num_samples`` counts)."""
    return len(group_configs(config or {}))


@dataclass(frozen=True)
class Member:
    """A member of a Tune trial as MLflow and Optuna see it: a trial of its own."""

    trial_id: str  # ``member_id``
    position: int  # in the trial's ``MEMBERS``
    config: dict[str, Any]  # its config
    size: int  # how many configurations its Tune trial trains


def members_of(trial_id: str, config: Any) -> list[Member]:
    """The members of the Tune trial ``trial_id`` (one, or a fused trial's several)."""
    configs = group_configs(config or {})
    return [
        Member(member_id(trial_id, position, len(configs)), position, member, len(configs))
        for position, member in enumerate(configs)
    ]


class _MemberCheckpoint:
    """Member ``position``'s part of a trial's Tune checkpoint, read as a lone training
    state's folder is (``as_directory``; a checkpoint written before trials were groups
    holds member 0's at its top)."""

    def __init__(self, checkpoint: Any, position: int) -> None:
        self.checkpoint, self.position = checkpoint, position

    @contextmanager
    def as_directory(self) -> Iterator[str]:
        with self.checkpoint.as_directory() as folder:
            place = member_folder(Path(folder), self.position)
            yield str(place if place.is_dir() or self.position else folder)


def member_checkpoint(checkpoint: Any, position: int) -> Any:
    """Member ``position``'s checkpoint in a trial's ``checkpoint`` (None: none)."""
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
    """Tune's results with every trial replaced by its members, each read as a lone
    trial's result (``metrics``, ``config``, ``metrics_dataframe``, ``checkpoint``,
    ``error``), so the end of a search (MLflow reconciled, the summary, the best models
    registered) sees one trial per configuration."""

    def __init__(self, results: Any) -> None:
        self.results = results
        self._items: list[Any] = []
        self.num_terminated = self.num_errors = 0
        listed = list(results)
        statuses = _statuses(results, len(listed))
        for result, status in zip(listed, statuses, strict=True):
            config = dict(result.config or {})
            trial_id = str((result.metrics or {}).get("trial_id", "?"))
            expanded = [_member_result(result, m) for m in members_of(trial_id, config)]
            self._items.extend(expanded)
            if result.error is not None:
                self.num_errors += len(expanded)
            elif status == "TERMINATED":
                self.num_terminated += len(expanded)
        if len(self._items) == len(listed):  # groups of one: Tune's own counts
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
    """The id of the Tune trial a result of ``MemberResults`` comes from."""
    fused = getattr(result, "tune_trial_id", None)
    return str(fused) if fused is not None else str((result.metrics or {}).get("trial_id", "?"))


def _member_result(result: Any, member: Member) -> _MemberResult:
    """``result`` is Tune's ``Result``, or a trial read back from a saved experiment
    (``_extend.saved_results``: no table, no checkpoint)."""
    frame = getattr(result, "metrics_dataframe", None)
    rows = None
    if frame is not None and member_key(member.position, "epoch") not in frame:
        rows = frame  # a trial's results written before trials were groups: its own
    elif frame is not None:
        prefix = member_key(member.position, "")
        own = [c for c in frame.columns if str(c).startswith(prefix)]
        epoch = member_key(member.position, "epoch")
        if epoch in frame:
            rows = frame[frame[epoch].notna()][own].rename(columns=lambda c: str(c)[len(prefix) :])
    reported = member_metrics(dict(result.metrics or {})).get(member.position, {})
    last: dict[str, Any] = {}
    if rows is not None and len(rows):
        last = {k: v for k, v in rows.iloc[-1].to_dict().items() if v == v}
    if _epoch(reported) > _epoch(last):  # Tune's table ends before its last result
        last = dict(reported)  # (a trial's end its last save missed: _settle.settle_finished)
    fused_trial = str((result.metrics or {}).get("trial_id", "?"))
    last["trial_id"] = member.trial_id
    checkpoint = member_checkpoint(getattr(result, "checkpoint", None), member.position)
    return _MemberResult(last, member.config, rows, checkpoint, result.error, fused_trial)


def _epoch(report: Mapping[str, Any]) -> float:
    try:
        return float(report.get("epoch", -1))
    except (TypeError, ValueError):
        return -1.0
