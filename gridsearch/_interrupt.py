"""How a search stops before its end, always the same way: through Ray Tune's own graceful
interruption (the one Ctrl+C triggers), which ends the trials, saves the experiment and
returns, so that the MLflow runs are closed and ``--resume`` continues where it stopped.

- **Ctrl+C** (SIGINT) and **SIGTERM** (a scheduler's or a user's ``kill``): the driver's
  one handler (``gridsearch._signals.Signals``) asks for this stop, with the signal as the
  reason, instead of Tune's handler or Ray's abort.
- **A disk about to fill** (``DiskGuard``): the search stops while some space is left
  under every local path it writes (the runs directory, a local ``--storage-path``, an
  sqlite tracking store or Optuna study), rather than failing trials and truncating
  Tune's state when a write finally meets ENOSPC.
- **A disk that filled anyway** (the guard set low, another process filling it between
  two checks): the first trial that fails for it stops the search the same way, before
  Tune retries it on the full disk and gives it up as failed; the failure is not counted
  against the trial (it is left to ``--resume``, from its last checkpoint, under its own
  id). Its ``error.pkl``, cut short by the full disk, is removed (Tune would fail reading
  it back; ``error.txt`` keeps the error).

Whatever a trial failed for, the guard removes the ``error.pkl`` Tune writes beside its
``error.txt``: it pickles the error's class as code (``cloudpickle`` by value), which a
``--resume`` refuses to read back (``gridsearch._pickles``); Tune then reports the
error from ``error.txt``, which holds the same text.

So that the writes of a search that stops for a full disk still fit (Tune's experiment
state and error files, MLflow's ends of runs), the guard sets space aside on each device
it watches while Tune runs (``Reserve``, a file of ``RESERVE_BYTES``) and gives it back
when it stops the search for the disk, and at the experiment's end. Ray's own log lines
about a full disk (a trial's task failed, the experiment state not saved) are one line
each, without their tracebacks (``quiet_disk_full_logs``): the guard says what happened.

Tune treats SIGUSR1 like SIGINT; ``Interruption.request`` sends it to this process.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import signal
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ray.tune import Callback

from gridsearch._damage import drop_cut_short_pickle
from gridsearch._outcome import is_disk_full

__all__ = [
    "RESERVE_BYTES",
    "DiskGuard",
    "Interruption",
    "Reserve",
    "quiet_disk_full_logs",
]

logger = logging.getLogger(__name__)


class Interruption:
    """Why the search was asked to stop (None while it was not), and the asking."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def request(self, reason: str) -> None:
        """Stop the search gracefully, giving ``reason`` (the first reason stays)."""
        if self.reason is None:
            self.reason = reason
        if signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):
            raise KeyboardInterrupt(reason)  # Tune is not running yet: stop right here
        os.kill(os.getpid(), signal.SIGUSR1)


class DiskGuard(Callback):
    """Checks the free space under ``paths`` (local directories) every ``every_s`` while
    Tune runs, and stops the search (``interruption``) when one has less than
    ``min_free_bytes`` left, or when a trial failed for a full disk. Holds a ``Reserve``
    on their devices while Tune runs (``reserve_bytes``, default ``RESERVE_BYTES``; 0: none)."""

    def __init__(
        self,
        paths: Iterable[Path],
        min_free_bytes: int,
        interruption: Interruption,
        every_s: float = 2.0,
        reserve_bytes: int | None = None,
    ) -> None:
        self.paths = list(dict.fromkeys(Path(p) for p in paths))
        self.min_free_bytes = min_free_bytes
        self.interruption = interruption
        self.every_s = every_s
        self.reserve = Reserve(
            self.paths, RESERVE_BYTES if reserve_bytes is None else reserve_bytes
        )
        self._last = 0.0
        quiet_disk_full_logs()

    def low(self) -> tuple[Path, int] | None:
        """The first path with too little free space, and how much it has."""
        for path in self.paths:
            free = _free(path)
            if free is not None and free < self.min_free_bytes:
                return path, free
        return None

    def fullest(self) -> tuple[Path, int] | None:
        """The path with the least free space, and how much it has."""
        found = [(path, free) for path in self.paths if (free := _free(path)) is not None]
        return min(found, key=lambda pair: pair[1]) if found else None

    def setup(
        self,
        stop: Any = None,
        num_samples: int | None = None,
        total_num_samples: int | None = None,
        **info: Any,
    ) -> None:
        """Tune starts: the reserve is set aside."""
        self.reserve.take()

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self.reserve.give_back()
        for trial in trials:  # Tune reads them back next, for its results
            for folder in _trial_folders(trial):
                drop_cut_short_pickle(folder / "error.pkl")

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        if self._after_failure(trial):
            _not_counted(trial)  # Tune retries it (and --resume restores it) as it was

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._after_failure(trial)

    def _after_failure(self, trial: Any) -> bool:
        """A trial failed: its pickled error is removed (see the module docstring); when
        it failed for a full disk, the search stops (resumably): True then."""
        folders = _trial_folders(trial)
        _forget_pickled_error(trial, folders)
        error = next((e for f in folders if is_disk_full(e := _tail(f / "error.txt"))), None)
        if error is None:
            return False
        if self.interruption.reason is None:
            path, free = self.fullest() or (folders[0].parent, 0)
            self._stop(
                f"no space left on {path}: a trial's write failed "
                f"({_last_line(error)}), {free / 2**20:.0f} MiB free"
            )
        return True

    def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
        now = time.monotonic()
        if now - self._last < self.every_s or self.interruption.reason:
            return
        self._last = now
        found = self.low()
        if found is not None:
            path, free = found
            self._stop(
                f"no space left on {path}: {free / 2**20:.0f} MiB free, the search stops "
                f"below {self.min_free_bytes / 2**20:.0f} MiB (--min-free-disk)"
            )

    def _stop(self, reason: str) -> None:
        """Stop the search for the disk, its reserve given back for the last writes."""
        logger.error("%s; stopping the search so that --resume can continue it", reason)
        self.reserve.give_back()
        self.interruption.request(reason)


RESERVE_BYTES = 16 * 2**20  # enough for Tune's last save and MLflow's ends of runs
_RESERVE_PREFIX = ".disk-reserve-"


class Reserve:
    """Space set aside on each device under ``paths``: one file of ``size`` bytes per
    device (``.disk-reserve-PID`` in the first path on it), allocated by ``take`` when
    at least twice that is free, removed by ``give_back``. Files left by a process that
    no longer runs are removed by the next ``take``."""

    def __init__(self, paths: Iterable[Path], size: int) -> None:
        self.paths = list(paths)
        self.size = size
        self.files: list[Path] = []

    def take(self) -> None:
        if self.size <= 0:
            return
        devices: set[int] = set()
        for path in self.paths:
            folder = _existing(path)
            if folder is None or not folder.is_dir():
                continue
            device = folder.stat().st_dev
            if device in devices:
                continue
            devices.add(device)
            _remove_stale(folder)
            if shutil.disk_usage(folder).free >= 2 * self.size:
                file = folder / f"{_RESERVE_PREFIX}{os.getpid()}"
                if _allocate(file, self.size):
                    self.files.append(file)

    def give_back(self) -> int:
        """Remove the reserve files; returns the bytes given back."""
        given = 0
        while self.files:
            file = self.files.pop()
            try:
                size = file.stat().st_size
                file.unlink()
            except OSError:
                continue
            given += size
        return given


def _allocate(file: Path, size: int) -> bool:
    """Allocate ``size`` bytes to ``file`` (written out where the file system cannot
    allocate without writing); False, and no file, when it did not fit."""
    try:
        with file.open("wb") as handle:
            try:
                os.posix_fallocate(handle.fileno(), 0, size)
            except OSError as err:
                if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                chunk = bytes(2**20)
                for start in range(0, size, len(chunk)):
                    handle.write(chunk[: size - start])
                handle.flush()
                os.fsync(handle.fileno())
    except OSError:
        file.unlink(missing_ok=True)
        return False
    return True


def _remove_stale(folder: Path) -> None:
    """Remove the reserve files of processes that no longer run."""
    for file in folder.glob(f"{_RESERVE_PREFIX}*"):
        pid = file.name.removeprefix(_RESERVE_PREFIX)
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            file.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process
    return True


def _not_counted(trial: Any) -> None:
    """A failure for a full disk is not the trial's: not counted towards its
    ``--max-failures``, and its error not reported with its results (Tune clears it
    the same way when it resumes a trial)."""
    metadata = trial.run_metadata
    metadata.num_failures = max(metadata.num_failures - 1, 0)
    metadata.error_filename = None
    metadata.pickled_error_filename = None
    metadata.invalidate_cache()


def _forget_pickled_error(trial: Any, folders: list[Path]) -> None:
    """Remove the trial's ``error.pkl`` (code, see the module docstring): Tune reads its
    ``error.txt`` instead."""
    for folder in folders:
        (folder / "error.pkl").unlink(missing_ok=True)
    metadata = getattr(trial, "run_metadata", None)
    if metadata is not None and metadata.pickled_error_filename is not None:
        metadata.pickled_error_filename = None
        metadata.invalidate_cache()


def _trial_folders(trial: Any) -> list[Path]:
    """A trial's folders on this machine: where the driver writes its error files
    (Tune's staging folder) and, for a local storage path, where they are kept."""
    folders = []
    if getattr(trial, "local_path", None):
        folders.append(Path(trial.local_path))
    storage = getattr(trial, "storage", None)
    filesystem = getattr(storage, "storage_filesystem", None)
    if getattr(filesystem, "type_name", None) == "local" and getattr(trial, "path", None):
        folders.append(Path(trial.path))
    return list(dict.fromkeys(folders))


def _existing(path: Path) -> Path | None:
    """``path`` or its nearest existing parent."""
    return next((p for p in (path, *path.parents) if p.exists()), None)


def _free(path: Path) -> int | None:
    """The free bytes under ``path`` (its nearest existing parent); None: none exists."""
    existing = _existing(path)
    return None if existing is None else shutil.disk_usage(existing).free


def _tail(path: Path, size: int = 8192) -> str:
    """The last ``size`` bytes of a text file, or "" when it cannot be read."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(path.stat().st_size - size, 0))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _last_line(text: str, limit: int = 200) -> str:
    """The last line that says something (a Ray task error ends with its cause)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""


# Ray's loggers that report a full disk with a traceback, and what each record is
_RAY_LOGGERS = (
    "ray.tune.execution.tune_controller",  # "Trial task failed for trial ..."
    "ray.tune.execution.experiment_state",  # "Saving experiment state ... failed"
    "ray.tune.tune",  # "Experiment state snapshotting failed"
    "ray._private.worker",  # "Unhandled error ...": a failed task nobody waited for
)


class _DiskFullOneLine(logging.Filter):
    """A record about a full disk in one line, its traceback left out; a trial's
    failure for one is left out (the ``DiskGuard`` says it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        message = record.getMessage()
        if not (is_disk_full(error) or (error is None and is_disk_full(message))):
            return True
        if error is not None and record.name.endswith("tune_controller"):
            return False
        first = message.strip().splitlines()[0].rstrip(": ") if message.strip() else ""
        cause = _last_line(str(error) if error is not None else message)
        record.msg = f"{first}: {cause}" if cause and cause != first else first
        record.args = ()
        record.exc_info = record.exc_text = record.stack_info = None
        return True


_ONE_LINE = _DiskFullOneLine()


def quiet_disk_full_logs() -> None:
    """Ray's log lines about a full disk as one line each (see ``_DiskFullOneLine``);
    other records are left as they are. Idempotent."""
    for name in _RAY_LOGGERS:
        found = logging.getLogger(name)
        if _ONE_LINE not in found.filters:
            found.addFilter(_ONE_LINE)
