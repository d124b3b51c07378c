"""SIGINT and SIGTERM while a search runs: one handler for the driver's whole life
(``gridsearch.driver``)."""

from __future__ import annotations

import os
import signal
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
    Once ``done`` (everything recorded), signals are ignored: the driver is exiting."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, interruption: Interruption) -> None:
        self.interruption = interruption
        self.tune_running = False
        self.done = False
        self.received = 0
        self._previous: dict[int, Any] = {}
        self._env: str | None = None

    def install(self) -> None:
        """(Again) make this the handler: ``ray.init`` sets its own for SIGTERM."""
        for signum in self.SIGNALS:
            previous = signal.signal(signum, self._on_signal)
            self._previous.setdefault(signum, previous)

    def __enter__(self) -> Signals:
        self._env = os.environ.get(_TUNE_SIGINT)
        os.environ[_TUNE_SIGINT] = "1"
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
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
        raise KeyboardInterrupt(name)


_TUNE_SIGINT = "TUNE_DISABLE_SIGINT_HANDLER"  # read by tune.run when it starts
