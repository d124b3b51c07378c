"""One live driver per experiment, and one process at a time setting up a tracking store.

``ExperimentLock`` is a file ``RUNS_DIR/locks/NAME.lock`` holding who runs the search
(host, pid, the process's start time, since when). It is taken by ``link(2)``-ing a
complete temporary file onto that name, which fails when the name exists: atomic on a
local file system and on NFS (version 3 and later), so two drivers that share a runs
directory over NFS exclude each other too. It cannot live on an object store (s3://,
gs://), and does not need to: the runs directory is always a file system path, even
when ``--storage-path`` is a URI. Two drivers of one experiment with *different* runs
directories are not excluded (nothing they share can hold a lock).

The lock is released on every exit path of the driver (a context manager, with SIGTERM
turned into the same graceful stop as Ctrl+C by ``gridsearch.run``). A lock left by a
killed driver is broken only when its holder is provably gone: the same host, and no
process with that pid and start time (or a reboot since). A lock held from another host
is never broken automatically; the error says which host and process hold it, and that
the file may be removed once that process is known to be gone.

A lock is written whole (a complete file linked into place), so one that is not what
this module writes (not a regular file, not a small JSON object with the holder's
fields, each of its type: a pid from 1 up, a host named) was made or changed by
something else: nothing can say whether its holder runs, and it is never broken; the
error (``LockUnreadable``) names the file and the field.

``setup_lock`` serialises the first use of a sqlite tracking store in a runs directory
(MLflow creating its schema from two processes at once fails) with ``flock(2)``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path

__all__ = ["ExperimentLock", "Holder", "LockHeld", "LockUnreadable", "setup_lock"]


class LockHeld(RuntimeError):
    """Another live driver holds the experiment's lock (the message names it)."""


class LockUnreadable(LockHeld):
    """The lock file is not one this module writes (the message names it and the field):
    nothing can tell whether its holder runs."""


@dataclass(frozen=True)
class Holder:
    host: str
    pid: int
    started: str  # the process's start time in clock ticks since boot (/proc), or ""
    boot: str  # this boot's id (/proc/sys/kernel/random/boot_id), or ""
    since: str  # when the lock was taken, local time

    @classmethod
    def me(cls) -> Holder:
        pid = os.getpid()
        return cls(
            socket.gethostname(),
            pid,
            _process_start(pid),
            _boot_id(),
            time.strftime("%Y-%m-%d %H:%M:%S"),
        )

    def describe(self) -> str:
        return f"host {self.host}, pid {self.pid}, since {self.since}"

    def gone(self) -> bool:
        """Provably not running: on this host, and its pid is free, taken by a later
        process, or from before a reboot. From another host: never provable here."""
        if self.host != socket.gethostname():
            return False
        if self.boot and self.boot != _boot_id():
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another user's
            return False
        return bool(self.started) and _process_start(self.pid) != self.started


class ExperimentLock:
    """``with ExperimentLock(path, "--experiment NAME"): ...`` (see the module docstring)."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what  # names the locked thing in messages
        self.holder = Holder.me()
        self._held = False

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):  # a second try after breaking a stale lock
            if self._link():
                self._held = True
                return
            other = self._read()
            self._refuse(other)
            self._break(other)
        raise LockHeld(f"{self.what}: could not take the lock {self.path}; another driver races")

    def check_free(self) -> None:
        """Raise ``LockHeld`` when another live driver holds the lock, writing nothing:
        for the checks that read what that driver may be writing, before the lock is
        taken."""
        self._refuse(self._read())

    def _read(self) -> Holder | None:
        """The holder the lock file names; None without a file. ``LockUnreadable`` for a
        file this module did not write."""
        try:
            return read_holder(self.path)
        except ValueError as err:
            raise LockUnreadable(
                f"{self.what}: the lock {self.path} is not one a driver writes ({err}); "
                "whether a driver holds it cannot be told: once none runs, remove it "
                f"(rm -r '{self.path}')"
            ) from None

    def _refuse(self, other: Holder | None) -> None:
        if other is not None and not other.gone():
            raise LockHeld(
                f"{self.what} is being run by another driver ({other.describe()}; lock "
                f"{self.path}): wait for it to end, or stop it; remove the lock file only "
                "if that process is gone"
            )

    def release(self) -> None:
        """Remove the lock if it is still ours (never another driver's)."""
        if self._held and _holder_or_none(self.path) == self.holder:
            self.path.unlink(missing_ok=True)
        self._held = False

    def __enter__(self) -> ExperimentLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _link(self) -> bool:
        temporary = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}.tmp")
        temporary.write_text(json.dumps(asdict(self.holder)))
        try:
            os.link(temporary, self.path)
            return True
        except FileExistsError:
            return False
        finally:
            temporary.unlink(missing_ok=True)

    def _break(self, stale: Holder | None) -> None:
        """Remove a stale lock: renamed away first, so that of two drivers breaking it at
        once only one succeeds, and a lock taken meanwhile by a third is not removed."""
        aside = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}.stale")
        with contextlib.suppress(FileNotFoundError):
            os.rename(self.path, aside)
            moved = _holder_or_none(aside)
            if moved != stale:  # a live driver took it between our read and the rename
                with contextlib.suppress(FileExistsError):
                    os.link(aside, self.path)
            aside.unlink(missing_ok=True)


@contextlib.contextmanager
def setup_lock(path: Path) -> Iterator[None]:
    """Hold ``flock(2)`` on ``path`` for the block (one process at a time)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


_MAX_LOCK_BYTES = 4096  # a lock file is about 200 bytes
_PID_MAX = 2**22  # Linux's highest pid (/proc/sys/kernel/pid_max can go no higher)


def read_holder(path: Path) -> Holder | None:
    """The holder the lock file at ``path`` names; None when there is no file.
    ``ValueError`` naming what is wrong when it is not a lock file this module writes:
    not a regular file (a folder, a link), too large, not a JSON object, a field missing,
    unknown or of another type or range."""
    try:
        info = path.lstat()
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return None  # none there: no folder can hold one (the runs checks name why)
        raise ValueError(f"cannot be read: {err.strerror or err}") from None
    if not stat.S_ISREG(info.st_mode):
        what = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        what = "a symbolic link" if stat.S_ISLNK(info.st_mode) else what
        raise ValueError(f"it is {what}")
    if info.st_size > _MAX_LOCK_BYTES:
        raise ValueError(f"{info.st_size:,} bytes, a lock is at most {_MAX_LOCK_BYTES:,}")
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None  # released meanwhile
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ValueError(f"not a JSON object ({type(err).__name__})") from None
    if not isinstance(values, dict):
        raise ValueError(f"a JSON {type(values).__name__}, expected an object")
    expected = {f.name: str(f.type) for f in fields(Holder)}
    unknown = sorted(set(values) - set(expected))
    if unknown:
        raise ValueError(f"field {str(unknown[0])[:40]!r}: not a field of a lock")
    for name, kind in expected.items():
        if name not in values:
            raise ValueError(f"field {name!r}: missing")
        value = values[name]
        if kind == "int":
            if not (isinstance(value, int) and not isinstance(value, bool)):
                raise ValueError(f"field {name!r}: {_shown(value)}, expected an integer")
            if not 0 < value <= _PID_MAX:
                raise ValueError(f"field {name!r}: {value}, expected a pid from 1 to {_PID_MAX}")
        elif not isinstance(value, str):
            raise ValueError(f"field {name!r}: {_shown(value)}, expected a string")
    if not values["host"]:
        raise ValueError("field 'host': empty, expected the holder's host name")
    if values["started"] and not values["started"].isdigit():
        raise ValueError(f"field 'started': {_shown(values['started'])}, expected clock ticks")
    return Holder(**values)


def _holder_or_none(path: Path) -> Holder | None:
    """The holder, or None where there is none or it cannot be read (never ours then)."""
    try:
        return read_holder(path)
    except ValueError:
        return None


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else f"{text[:30]}... ({type(value).__name__})"


def _process_start(pid: int) -> str:
    """A process's start time (clock ticks after boot, /proc/PID/stat field 22): with the
    pid, it names one process even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19]


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""
