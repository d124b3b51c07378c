"""The Ray Tune function trainable: a thin wrapper around :class:`Trainer`.

It builds the typed config from Tune's dict (unknown keys are refused), takes the data
that the driver put into Ray's object store once (``tune.with_parameters``; Ray copies
it to each node once, and the trials on a node share it), reports every epoch with a
checkpoint, and resumes from ``tune.get_checkpoint()``::

    trainable = tune.with_parameters(grounded_trainable, data=data, senteval=benchmark)

``data`` may instead be a store URI that every node can read (shared storage, ``s3://``,
``gs://``): each trial process then reads the shards itself. ``senteval`` is a loaded
:class:`~storage.senteval.SemanticBenchmark` (shipped the same way) or a directory
every node can read. With ``seeds_per_config`` k > 1 the trial trains its configuration
at k seeds side by side (as one fused model where it can: ``trainables.seeds``) and
reports their mean and spread, with ``SEEDS_FUSED`` saying whether they were fused.

``fused_trainable`` is the trial of a fused search (``python -m gridsearch.run --fuse K``):
its config holds several configurations of one shape (``MEMBERS``), trained together
as one fused model (``trainables.seeds.MemberGroup``), each member reported under its own
prefix (``member_key``) in the trial's one result per epoch. A member leaves the group
when its epochs are done, or when the driver's searcher stops it early: it writes the
member's position and the epoch it was stopped after into ``stop_file`` (in
``progress_dir``), which the trial reads after every report (Tune hands a report to the
searcher before the trial goes on) and after a restore: a trial restored from a
checkpoint older than the stop trains the member up to that epoch again (the same
epochs, as it trained them before), then stops it, so it always ends as it was stopped.

With ``progress_dir`` (a directory the driver made; on a node where it does not exist,
nothing is written) a thread writes ``<progress_dir>/<trial id>.json`` every few seconds:
the epoch being trained and the fraction of its steps done. It is a side channel for the
search's progress display, not a Tune result: epochs are reported only by ``tune.report``.
"""

from __future__ import annotations

import functools
import json
import logging
import tempfile
import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from ray import tune

from storage import write_text_atomic
from storage.senteval import SemanticBenchmark
from trainables.config import TrainConfig
from trainables.data import TrainingData
from trainables.names import MEMBERS_FUSED, SEEDS_FUSED
from trainables.seeds import MemberGroup, SeedGroup

__all__ = [
    "MEMBERS",
    "MEMBERS_FUSED",
    "PROGRESS_EVERY_S",
    "SEEDS_FUSED",
    "epoch_progress",
    "fused_trainable",
    "grounded_trainable",
    "member_key",
    "member_metrics",
    "read_stops",
    "stop_file",
]

PROGRESS_EVERY_S = 5.0  # how often a trial writes its within-epoch progress
# a fused trial's config: the list of its members' configs (each as a lone trial's)
MEMBERS = "members"
_MEMBER_PREFIX = "m"

logger = logging.getLogger(__name__)


def grounded_trainable(
    config: dict[str, Any],
    data: TrainingData | str,
    senteval: SemanticBenchmark | str | None = None,
    gpu_share: float | None = None,
    verify: bool = True,
    helpers: Collection[str] = (),
    seeds_per_config: int = 1,
    complete_at: Collection[int] = (),
    progress_dir: str | None = None,
) -> None:
    """``gpu_share``: this trial's fraction of a GPU packed with others; its memory is
    capped to that share so one trial cannot starve the rest. ``verify``: check a store
    read by the trial itself against its manifest's checksums. ``helpers``: the keys of
    ``config`` that are the search space's own parameters, not TrainConfig's (Optuna puts
    them beside the TrainConfig keys they were decoded into); every other key must be a
    TrainConfig field. ``seeds_per_config``: train the configuration at that many seeds
    (``seed``, ``seed + 1``, ...) and report their mean (``trainables.seeds``).
    ``complete_at``: the epochs where the scheduler may stop the trial (ASHA's rungs),
    whose reports must hold their own test battery (``trainables.loop``: elsewhere an
    epoch's battery may come with the next report). ``progress_dir``: where to write the
    within-epoch progress (module docstring)."""
    train_config = TrainConfig.from_dict({k: v for k, v in config.items() if k not in helpers})
    data = _trial_data(data, verify, gpu_share)
    group = SeedGroup(train_config, data, senteval, seeds_per_config, complete_at=complete_at)
    if seeds_per_config > 1:
        logger.info(
            "the %d seeds train %s",
            seeds_per_config,
            "as one fused model" if group.fused else "one after the other",
        )
    _report_epochs(group, progress_dir, lambda metrics: {**metrics, SEEDS_FUSED: int(group.fused)})


def fused_trainable(
    config: dict[str, Any],
    data: TrainingData | str,
    senteval: SemanticBenchmark | str | None = None,
    gpu_share: float | None = None,
    verify: bool = True,
    helpers: Collection[str] = (),
    seeds_per_config: int = 1,
    complete_at: Collection[int] = (),
    progress_dir: str | None = None,
    metric: str | None = None,
    mode: str = "max",
) -> None:
    """A fused search's trial (module docstring): ``config[MEMBERS]`` are the members'
    configs, each as ``grounded_trainable`` takes one (``helpers`` dropped). Every epoch
    one report: each member still training under ``member_key`` (the same keys and
    values as its lone trial's report), ``MEMBERS_FUSED``, and, for Tune's own
    bookkeeping, the metrics of the member best on ``metric`` (``mode``) un-prefixed.
    The other arguments are ``grounded_trainable``'s."""
    members = [
        TrainConfig.from_dict({k: v for k, v in member.items() if k not in helpers})
        for member in config[MEMBERS]
    ]
    data = _trial_data(data, verify, gpu_share)
    group = MemberGroup(members, data, senteval, seeds_per_config, complete_at=complete_at)
    logger.info(
        "the %d members train %s",
        len(members),
        "as one fused model" if group.fused else "one after the other",
    )
    stops = _stop_path(progress_dir)
    _report_epochs(
        group,
        progress_dir,
        lambda reports: _group_result(reports, int(group.fused), metric, mode),
        after_each=lambda: _apply_stops(group, stops),
    )


def _trial_data(data: TrainingData | str, verify: bool, gpu_share: float | None) -> TrainingData:
    """The trial's data (a store it reads itself when given a path), with its GPU memory
    capped to its share of a GPU packed with others."""
    if gpu_share is not None and torch.cuda.is_available():
        torch.cuda.set_per_process_memory_fraction(gpu_share)
    return _read_store(data, verify) if isinstance(data, str) else data


def _report_epochs(
    group: SeedGroup | MemberGroup,
    progress_dir: str | None,
    result: Callable[[Any], dict[str, Any]],
    after_each: Callable[[], None] = lambda: None,
) -> None:
    """Resume ``group`` from Tune's checkpoint if there is one, then report each epoch's
    ``result(...)`` of ``group.run()`` with a checkpoint; ``after_each`` runs after the
    restore and after every report."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            group.load(Path(folder))
    after_each()
    with _epoch_progress(group, progress_dir):
        for report in group.run():
            with tempfile.TemporaryDirectory() as folder:
                group.save(Path(folder))
                tune.report(result(report), checkpoint=tune.Checkpoint.from_directory(folder))
            after_each()


def member_key(member: int, key: str) -> str:
    """Where a fused trial's result holds member ``member``'s metric ``key``."""
    return f"{_MEMBER_PREFIX}{member}/{key}"


def member_metrics(result: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """A fused trial's result split into its members' reports (those it holds), by
    member position, each with its keys as a lone trial's."""
    out: dict[int, dict[str, Any]] = {}
    for key, value in result.items():
        head, _, rest = key.partition("/")
        if rest and head[:1] == _MEMBER_PREFIX and head[1:].isdigit():
            out.setdefault(int(head[1:]), {})[rest] = value
    return out


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


def stop_file(progress_dir: str | Path, trial_id: str) -> Path:
    """The file through which the driver stops members of the fused trial ``trial_id``
    early: a JSON object, each stopped member's position -> the epoch it stops after."""
    return Path(progress_dir) / f"{trial_id}.stop.json"


def read_stops(path: Path | None) -> dict[int, int]:
    """The members ``stop_file`` stops, by position, each with the epoch it stops after
    (none when it does not exist)."""
    if path is None:
        return {}
    try:
        stops = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return {int(member): int(epoch) for member, epoch in stops.items()}


def _stop_path(progress_dir: str | None) -> Path | None:
    if not progress_dir or not Path(progress_dir).is_dir():
        return None  # a node without the driver's folder: members run to their end
    return stop_file(progress_dir, tune.get_context().get_trial_id())


def _apply_stops(group: MemberGroup, path: Path | None) -> None:
    """Stop the members the stop file names once they reported their stop epoch."""
    for member, epoch in sorted(read_stops(path).items()):
        if member in group.running and group.reported(member) >= epoch:
            logger.info("member %d stops early; %d train on", member, len(group.running) - 1)
            group.stop(member)


def epoch_progress(group: SeedGroup | MemberGroup) -> dict[str, float]:
    """The epoch ``group`` is training (1-based) and the fraction of its steps done, over
    all its seeds (``SeedGroup.progress``)."""
    epoch, done = group.progress()
    return {"epoch": epoch, "done": done}


@contextmanager
def _epoch_progress(group: SeedGroup | MemberGroup, progress_dir: str | None) -> Iterator[None]:
    """Write ``epoch_progress`` every ``PROGRESS_EVERY_S`` while the block runs."""
    if not progress_dir or not Path(progress_dir).is_dir():
        yield
        return
    path = Path(progress_dir) / f"{tune.get_context().get_trial_id()}.json"
    stop = threading.Event()

    def write() -> None:
        while not stop.wait(PROGRESS_EVERY_S):
            try:
                write_text_atomic(path, json.dumps(epoch_progress(group)))
            except OSError:  # a display's side channel: never fails the trial
                return

    thread = threading.Thread(target=write, name="epoch-progress", daemon=True)
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
