"""SIGINT and SIGTERM while a search runs: one handler for the driver's whole life
(``gridsearch.driver``)."""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from gridsearch._interrupt import Interruption

__all__ = ["Signals"]


class Signals:
    """SIGINT and SIGTERM while a search runs, handled one way (``with Signals(...)``).

    While Tune runs (``tune_running``), the first signal is Tune's graceful stop
    (``Interruption.request``: Tune ends the trials, saves the experiment and returns);
    Tune's own SIGINT handler is kept out (``TUNE_DISABLE_SIGINT_HANDLER``), so that
    Ctrl+C is recorded as the reason like SIGTERM. Any other signal (before Tune runs,
    after it returned, or a second one while it stops) stops the driver where it is
    (``KeyboardInterrupt``); the driver then closes what it opened as interrupted.
    Once ``done`` (everything recorded), signals are ignored: the driver is exiting.

    A handler runs wherever the main thread is, a finalizer included (a garbage
    collector's callback, a ``__del__``), which cannot pass an exception on: Python would
    print the stop as an ignored exception's traceback and carry on. Such a stop is raised
    again (``_unraisable``), outside the finalizer. A block that a stop must not cut short
    runs under ``deferred()``."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, interruption: Interruption) -> None:
        self.interruption = interruption
        self.tune_running = False
        self.done = False
        self.received = 0
        self._previous: dict[int, Any] = {}
        self._env: str | None = None
        self._last = signal.SIGINT  # the signal a stop was last raised for
        self._depth = 0  # deferred() blocks the main thread is in
        self._deferred: signal.Signals | None = None  # a stop that came in one
        self._hook = sys.unraisablehook

    def install(self) -> None:
        """(Again) make this the handler: ``ray.init`` sets its own for SIGTERM."""
        for signum in self.SIGNALS:
            previous = signal.signal(signum, self._on_signal)
            self._previous.setdefault(signum, previous)

    def __enter__(self) -> Signals:
        self._env = os.environ.get(_TUNE_SIGINT)
        os.environ[_TUNE_SIGINT] = "1"
        self._hook = sys.unraisablehook
        sys.unraisablehook = self._unraisable
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        sys.unraisablehook = self._hook
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        if self._env is None:
            os.environ.pop(_TUNE_SIGINT, None)
        else:
            os.environ[_TUNE_SIGINT] = self._env

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.done:
            return
        name = signal.Signals(signum).name
        self.received += 1
        if self.tune_running and self.received == 1:
            self.interruption.request(name)  # Tune's graceful stop
            return
        if self.interruption.reason is None:
            self.interruption.reason = name
        self._last = signal.Signals(signum)
        if self._depth:
            self._deferred = self._last  # raised when the block ends
            return
        raise KeyboardInterrupt(name)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """A block a stop must not cut short (a write to the tracking store: cut short
        inside SQLite, it left the store locked and the trials' ends unrecorded): a stop
        that comes meanwhile is raised when the block ends."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth and self._deferred is not None:
                stop, self._deferred = self._deferred, None
                if not self.done:
                    raise KeyboardInterrupt(stop.name)

    def _unraisable(self, unraisable: Any) -> None:
        """A stop raised in a finalizer: the same signal again a moment later, from a
        thread of its own, so that the main thread meets it once out of the finalizer
        (and of this hook); anything else as before."""
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and not self.done:
            threading.Timer(_AGAIN_S, _thread.interrupt_main, args=(self._last,)).start()
            return
        self._hook(unraisable)


_TUNE_SIGINT = "TUNE_DISABLE_SIGINT_HANDLER"  # read by tune.run when it starts
_AGAIN_S = 0.05  # how long a stop raised in a finalizer waits to be raised again
