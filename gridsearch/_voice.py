"""What a search says while it works, and that it is never silent for long.

Every line a search writes goes through one ``Voice``, which stamps it ``[m:ss]`` with the
time since the command began (the process's start, where ``/proc`` says when that was).
The work is a sequence of phases (loading the libraries, building or reading the data, the
C++ recurrence, Ray's start, Tune's restore, the trials' workers starting, registering the
models, waiting for the baselines if they are not done, stopping Ray): ``Voice.phase``
says what a phase does as it begins, with how long the same phase took the last time on
this machine (``PhaseTimes``), and while it runs a thread makes sure the search is heard
from at least every ``HEARD_EVERY_S``: after ``QUIET_S`` without a line it says how long the
phase has run and, from that measurement, about how long is left. The first time a phase
runs on a machine there is nothing measured to estimate from, and the line says so.

Nothing here imports more than the standard library: the first line is said before
PyTorch, Ray and MLflow are imported, which is the longest wait of a search's start.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

__all__ = [
    "HEARD_EVERY_S",
    "QUIET_S",
    "Phase",
    "PhaseTimes",
    "Voice",
    "clock_text",
    "process_age",
    "voice_of",
]

HEARD_EVERY_S = 10.0  # the longest a search is silent, from its first line to its last
QUIET_S = 7.0  # a phase silent this long says how far it is (the thread wakes every TICK_S)
TICK_S = 0.5
TIMES_FILE = "phase-seconds.json"

Write = Callable[[str], None]


def clock_text(seconds: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour on."""
    seconds = max(round(seconds), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def process_age() -> float | None:
    """Seconds since this process started (Linux's ``/proc``), or None where unknown."""
    try:
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(uptime - ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return None


def _cache_folder() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "grounded-gridsearch"


class PhaseTimes:
    """How long each phase took the last time it ran on this machine (seconds by phase
    key), kept in ``phase-seconds.json`` in the user's cache folder (``$XDG_CACHE_HOME``,
    else ``~/.cache``, ``/grounded-gridsearch``). Only what the estimates read: a file that
    cannot be read or written gives no estimates and stops nothing."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else _cache_folder() / TIMES_FILE
        self._lock = threading.Lock()

    def _read(self) -> dict[str, float]:
        try:
            found = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(found, dict):
            return {}
        return {str(k): float(v) for k, v in found.items() if isinstance(v, int | float)}

    def get(self, key: str) -> float | None:
        return self._read().get(key)

    def record(self, key: str, seconds: float) -> None:
        """``key`` took ``seconds``: written whole (a new file renamed over the old)."""
        with self._lock:
            times = {**self._read(), key: round(seconds, 1)}
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                scratch = self.path.with_name(f".{self.path.name}.{os.getpid()}")
                scratch.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
                os.replace(scratch, self.path)
            except OSError:
                pass


@dataclass
class Phase:
    what: str  # what it does, as "still WHAT" continues it
    key: str | None  # its PhaseTimes key (None: not measured)
    began: float
    estimate_s: float | None  # what it took last time
    quiet_s: float


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value < 90 else f"{value / 60:.1f} min"


class Voice:
    """The one writer of a search's lines (the module docstring). ``write`` takes each
    stamped line; ``started``: when the command began, on ``clock`` (default: now, or the
    process's start where it is known); ``times``: the phases' measured durations (None:
    none are read or kept). Used as a context manager, it runs the thread that breaks a
    phase's silence; without one, ``heartbeat()`` does that check once."""

    def __init__(
        self,
        write: Write,
        *,
        started: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        times: PhaseTimes | None = None,
        quiet_s: float = QUIET_S,
    ) -> None:
        self.write = write
        self.clock = clock
        self.started = clock() if started is None else started
        self.times = times
        self.quiet_s = quiet_s
        self.last = self.clock()
        self._phases: list[Phase] = []
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._entered = 0  # nested ``with`` blocks: one thread for all of them

    @classmethod
    def for_command(cls, write: Write) -> Voice:
        """A command's voice: stamped from the process's start, its phases measured."""
        age = process_age()
        started = time.monotonic() - age if age is not None else None
        return cls(write, started=started, times=PhaseTimes())

    # -- saying -------------------------------------------------------------------

    def __call__(self, text: str) -> None:
        """Say ``text``, each of its lines stamped."""
        with self._lock:
            stamp = f"[{clock_text(self.elapsed()):>7}]"
            for line in text.splitlines() or [""]:
                self.write(f"{stamp} {line}")
            self.last = self.clock()

    def elapsed(self) -> float:
        """Seconds since the command began."""
        return self.clock() - self.started

    def silent_for(self) -> float:
        return self.clock() - self.last

    # -- phases ---------------------------------------------------------------------

    def estimate(self, key: str | None) -> float | None:
        """How long the phase ``key`` took the last time on this machine."""
        return self.times.get(key) if self.times is not None and key else None

    @contextmanager
    def phase(
        self,
        what: str,
        key: str | None = None,
        *,
        say: str | None = None,
        note: str = "",
        estimate_s: float | None = None,
        quiet_s: float | None = None,
    ) -> Iterator[None]:
        """While the block runs, the search is ``what`` (``still WHAT`` after a silence).
        ``say``: the line that opens it (``say.format(time=...)`` where it has a
        ``{time}`` field, else with the time in brackets); None: it opens silently (the
        block says what it does itself). ``key``: its duration is recorded when the block
        ends normally, and read as the estimate (or ``estimate_s``). ``note``: added to
        the opening line's brackets."""
        began = self.begin(what, key, say=say, note=note, estimate_s=estimate_s, quiet_s=quiet_s)
        try:
            yield
        except BaseException:
            self.end(began, record=False)
            raise
        self.end(began)

    def begin(
        self,
        what: str,
        key: str | None = None,
        *,
        say: str | None = None,
        note: str = "",
        estimate_s: float | None = None,
        quiet_s: float | None = None,
    ) -> Phase:
        """``phase``'s start, for a phase that ends in another call (``end``)."""
        estimate = estimate_s if estimate_s is not None else self.estimate(key)
        began = Phase(what, key, self.clock(), estimate, quiet_s or self.quiet_s)
        with self._lock:
            self._phases.append(began)
        if say is not None:
            words = self.expected(estimate)
            if "{time}" in say:
                self(say.format(time=words))
            else:
                self(f"{say} ({'; '.join(filter(None, (words, note)))})")
        return began

    def end(self, phase: Phase, *, record: bool = True) -> float:
        """The phase ended, and any begun within it and left open (recorded under its
        key unless ``record`` is false); its seconds."""
        seconds = self.clock() - phase.began
        with self._lock:
            if phase in self._phases:
                del self._phases[self._phases.index(phase) :]
        if record and phase.key and self.times is not None:
            self.times.record(phase.key, seconds)
        return seconds

    @staticmethod
    def expected(estimate: float | None) -> str:
        """What a phase's opening line says of its length."""
        if estimate is None:
            return "not yet timed on this machine"
        return f"about {_seconds(estimate)}, as measured the last time here"

    def progress(self, phase: Phase) -> str:
        """``still WHAT: N s so far, ...`` of the running ``phase``."""
        ran = self.clock() - phase.began
        if ran < min(1.0, phase.quiet_s):  # the silence was the phase before it
            return f"  now {phase.what}"
        line = f"  still {phase.what}: {_seconds(ran)} so far"
        if phase.estimate_s is None:
            return line
        if phase.estimate_s < 1:
            return f"{line} (under a second last time)"
        if ran < phase.estimate_s:
            left = phase.estimate_s - ran
            return f"{line}, about {_seconds(left)} left ({_seconds(phase.estimate_s)} last time)"
        return f"{line} (longer than the {_seconds(phase.estimate_s)} it took last time)"

    # -- the silence breaker ---------------------------------------------------------

    def heartbeat(self) -> bool:
        """Say how far the current phase is if the search was silent for its ``quiet_s``;
        whether it did."""
        with self._lock:
            if not self._phases:
                return False
            phase = self._phases[-1]
            if self.silent_for() < phase.quiet_s:
                return False
            self(self.progress(phase))
            return True

    def _beat(self) -> None:
        while not self._stop.wait(TICK_S):
            self.heartbeat()

    def __enter__(self) -> Voice:
        with self._lock:
            self._entered += 1
            if self._thread is None:
                self._stop.clear()
                self._thread = threading.Thread(target=self._beat, name="search-voice", daemon=True)
                self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        with self._lock:
            self._entered -= 1
            if self._entered > 0 or self._thread is None:
                return
            thread, self._thread = self._thread, None
            self._stop.set()
        thread.join(timeout=5)


def voice_of(
    write: Write, *, clock: Callable[[], float] = time.monotonic, times: bool = True
) -> Voice:
    """``write`` itself when it is a ``Voice``, else a voice that writes to it (on
    ``clock``, stamped from now; ``times``: with the phases' measured durations)."""
    if isinstance(write, Voice):
        return write
    return Voice(write, clock=clock, times=PhaseTimes() if times else None)
