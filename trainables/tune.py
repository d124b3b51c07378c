"""The Ray Tune function trainable: a thin wrapper around a trial's group of models.

A trial is a group (``trainables.group.TrialGroup``): its config holds the configurations
it trains (``MEMBERS``: one for a lone trial, several of one shape in a fused search),
each at ``seeds_per_config`` seeds. The trainable builds the typed configs from Tune's dict
(unknown keys are refused), takes the data the driver put into Ray's object store once
(``tune.with_parameters``; Ray copies it to each node once, and the trials on a node
share it), reports every epoch with a checkpoint, and resumes from
``tune.get_checkpoint()``::

    trainable = tune.with_parameters(trial, data=data, senteval=benchmark, signals=signals)

Each epoch's result holds every member still training under its own prefix
(``member_key``: the keys and values its lone run reports), ``MEMBERS_FUSED``, and, for
Tune's own bookkeeping, the metrics of the member best on ``metric`` un-prefixed (a lone
trial's member's own).

``data`` may instead be a store URI that every node can read (shared storage, ``s3://``,
``gs://``): each trial process then reads the shards itself. ``senteval`` is a loaded
:class:`~storage.senteval.SemanticBenchmark` (shipped the same way) or a directory
every node can read.

**Signals** (``TrialSignals``, a Ray actor the driver starts): the trial's side channel
with the driver, through Ray, so it reaches a trial on any node of a cluster. The driver's
searcher stops a member early by telling the actor the member and the epoch it stops
after; the trial asks after every report (Tune hands a report to the searcher before the
trial goes on) and after a restore: a trial restored from a checkpoint older than the stop
trains the member up to that epoch again (the same epochs, as it trained them before), then
stops it, so it always ends as it was stopped. A thread tells the actor every
``PROGRESS_EVERY_S`` which epoch the trial trains and the share of its steps done: the
search's progress display reads it (epochs are reported only by ``tune.report``).
"""

from __future__ import annotations

import functools
import logging
import tempfile
import threading
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ray
import torch
from ray import tune
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from storage.senteval import SemanticBenchmark
from trainables.config import TrainConfig
from trainables.data import TrainingData
from trainables.group import TrialGroup
from trainables.names import MEMBERS_FUSED

__all__ = [
    "MEMBERS",
    "MEMBERS_FUSED",
    "PROGRESS_EVERY_S",
    "TrialSignals",
    "group_configs",
    "member_key",
    "member_metrics",
    "start_signals",
    "trial",
]

PROGRESS_EVERY_S = 5.0  # how often a trial tells its within-epoch progress
# a trial's config: the list of its members' configs (each as a TrainConfig's flat dict)
MEMBERS = "members"
_MEMBER_PREFIX = "m"

logger = logging.getLogger(__name__)


@ray.remote(num_cpus=0)
class TrialSignals:
    """What the driver and its trials tell each other besides Tune's reports (module
    docstring): the members stopped early, by trial, and each trial's progress."""

    def __init__(self) -> None:
        self._stops: dict[str, dict[int, int]] = {}
        self._progress: dict[str, dict[str, float]] = {}

    def stop(self, trial_id: str, member: int, epoch: int) -> None:
        """Member ``member`` of ``trial_id`` stops after epoch ``epoch``."""
        self._stops.setdefault(trial_id, {})[member] = epoch

    def stops(self, trial_id: str) -> dict[int, int]:
        """The members of ``trial_id`` stopped so far, each with its epoch."""
        return dict(self._stops.get(trial_id, {}))

    def tell_progress(self, trial_id: str, epoch: int, done: float) -> None:
        self._progress[trial_id] = {"epoch": float(epoch), "done": float(done)}

    def progress(self) -> dict[str, dict[str, float]]:
        """Every trial's last told progress: the epoch it trains (1-based), the share done."""
        return dict(self._progress)

    def forget(self, trial_id: str) -> None:
        """``trial_id`` ended: nothing of it is needed any more."""
        self._stops.pop(trial_id, None)
        self._progress.pop(trial_id, None)


def start_signals() -> Any:
    """A new ``TrialSignals`` actor on the connected Ray cluster (it ends with the driver),
    on the driver's own node: it needs no CPU, so Ray would place it anywhere, and a
    worker node that leaves the cluster would take it (and every trial's stops) along."""
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return TrialSignals.options(scheduling_strategy=here).remote()  # type: ignore[attr-defined]


def group_configs(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The members' configs of a trial's ``config``: its ``MEMBERS``, or itself (a trial
    of a search begun before trials were groups: a group of one)."""
    members = config.get(MEMBERS)
    return [dict(m) for m in members] if isinstance(members, list) else [dict(config)]


def trial(
    config: dict[str, Any],
    data: TrainingData | str,
    senteval: SemanticBenchmark | str | None = None,
    gpu_share: float | None = None,
    verify: bool = True,
    helpers: Collection[str] = (),
    seeds_per_config: int = 1,
    complete_at: Collection[int] = (),
    signals: Any = None,
    metric: str | None = None,
    mode: str = "max",
) -> None:
    """One trial (module docstring). ``gpu_share``: this trial's fraction of a GPU packed
    with others; its memory is capped to that share so one trial cannot starve the rest.
    ``verify``: check a store read by the trial itself against its manifest's checksums.
    ``helpers``: the keys of a member's config that are the search space's own parameters,
    not TrainConfig's (Optuna puts them beside the TrainConfig keys they were decoded
    into); every other key must be a TrainConfig field. ``seeds_per_config``: each member
    at that many seeds (``seed``, ``seed + 1``, ...), reported as their mean.
    ``complete_at``: the epochs where a scheduler may stop a member (ASHA's rungs), whose
    reports must hold their own test battery (``trainables._battery``). ``signals``: the
    driver's ``TrialSignals`` (None: no member is stopped early, no progress told).
    ``metric``, ``mode``: which member's metrics the result holds un-prefixed."""
    members = [
        TrainConfig.from_dict({k: v for k, v in member.items() if k not in helpers})
        for member in group_configs(config)
    ]
    if gpu_share is not None and torch.cuda.is_available():
        torch.cuda.set_per_process_memory_fraction(gpu_share)
    data = _read_store(data, verify) if isinstance(data, str) else data
    group = TrialGroup(members, data, senteval, seeds_per_config, complete_at=complete_at)
    if len(members) * seeds_per_config > 1:
        logger.info("the %d models train %s", len(members) * seeds_per_config,
                    "as one fused model" if group.fused else "one after the other")  # fmt: skip
    trial_id = tune.get_context().get_trial_id()
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            group.load(Path(folder))
    _apply_stops(group, signals, trial_id)
    with _told_progress(group, signals, trial_id):
        for reports in group.run():
            result = _group_result(reports, int(group.fused), metric, mode)
            with tempfile.TemporaryDirectory() as folder:
                group.save(Path(folder))
                tune.report(result, checkpoint=tune.Checkpoint.from_directory(folder))
            _apply_stops(group, signals, trial_id)


def member_key(member: int, key: str) -> str:
    """Where a trial's result holds member ``member``'s metric ``key``."""
    return f"{_MEMBER_PREFIX}{member}/{key}"


def member_metrics(result: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """A trial's result split into its members' reports (those it holds), by member
    position, each with its keys as a lone run's. A result without member keys (written
    before trials were groups) is member 0's."""
    out: dict[int, dict[str, Any]] = {}
    for key, value in result.items():
        head, _, rest = key.partition("/")
        if rest and head[:1] == _MEMBER_PREFIX and head[1:].isdigit():
            out.setdefault(int(head[1:]), {})[rest] = value
    return out if out or "epoch" not in result else {0: dict(result)}


def _group_result(
    reports: dict[int, dict[str, float]], fused: int, metric: str | None, mode: str
) -> dict[str, Any]:
    result: dict[str, Any] = {MEMBERS_FUSED: fused}
    for member, report in reports.items():
        result.update({member_key(member, k): v for k, v in report.items()})
    sign = -1.0 if mode == "min" else 1.0

    def score(member: int) -> float:
        value = reports[member].get(metric or "", float("nan"))
        return -float("inf") if value != value else sign * float(value)

    lead = max(sorted(reports), key=score)
    return {**reports[lead], **result}


def _apply_stops(group: TrialGroup, signals: Any, trial_id: str) -> None:
    """Stop the members the driver stopped, once they reported their stop epoch."""
    if signals is None:
        return
    for member, epoch in sorted(ray.get(signals.stops.remote(trial_id)).items()):
        if member in group.running and group.reported(member) >= epoch:
            logger.info("member %d stops early; %d train on", member, len(group.running) - 1)
            group.stop(member)


@contextmanager
def _told_progress(group: TrialGroup, signals: Any, trial_id: str) -> Iterator[None]:
    """Tell ``signals`` the group's progress every ``PROGRESS_EVERY_S`` while the block
    runs (a display's side channel: it never fails the trial)."""
    if signals is None:
        yield
        return
    stop = threading.Event()

    def tell() -> None:
        while not stop.wait(PROGRESS_EVERY_S):
            epoch, done = group.progress()
            try:
                signals.tell_progress.remote(trial_id, epoch, done)
            except Exception:  # the driver is gone: the trial ends soon anyway
                return

    thread = threading.Thread(target=tell, name="trial-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@functools.lru_cache(maxsize=1)
def _read_store(uri: str, verify: bool) -> TrainingData:
    """A store read by the trial itself, once per worker process."""
    return TrainingData.from_store(uri, verify=verify)
