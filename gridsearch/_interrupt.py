"""How a search stops before its end, always the same way: through Ray Tune's own graceful
interruption (the one Ctrl+C triggers), which ends the trials, saves the experiment and
returns, so that the MLflow runs are closed and ``--resume`` continues where it stopped.

- **Ctrl+C** (SIGINT): Tune's handler.
- **SIGTERM** (a scheduler's or a user's ``kill``): the same stop, instead of Ray's abort.
- **A disk about to fill** (``DiskGuard``): the search stops while some space is left
  under every local path it writes (the runs directory, a local ``--storage-path``, an
  sqlite tracking store or Optuna study), rather than failing trials and truncating
  Tune's state when a write finally meets ENOSPC.

Tune treats SIGUSR1 like SIGINT; ``Interruption.request`` sends it to this process.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import time
from collections.abc import Iterable
from pathlib import Path
from types import FrameType
from typing import Any

from ray.tune import Callback

from gridsearch._write_queue import is_disk_full

__all__ = ["DiskGuard", "Interruption", "is_disk_full"]

logger = logging.getLogger(__name__)


class Interruption:
    """Why the search was asked to stop (None while it was not), and the asking."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._previous: Any = None

    def request(self, reason: str) -> None:
        """Stop the search gracefully, giving ``reason`` (the first reason stays)."""
        if self.reason is None:
            self.reason = reason
        if signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):
            raise KeyboardInterrupt(reason)  # Tune is not running yet: stop right here
        os.kill(os.getpid(), signal.SIGUSR1)

    def __enter__(self) -> Interruption:
        self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGTERM, self._previous or signal.SIG_DFL)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.request("SIGTERM")


class DiskGuard(Callback):
    """Checks the free space under ``paths`` (local directories) every ``every_s`` while
    Tune runs, and stops the search (``interruption``) when one has less than
    ``min_free_bytes`` left."""

    def __init__(
        self,
        paths: Iterable[Path],
        min_free_bytes: int,
        interruption: Interruption,
        every_s: float = 2.0,
    ) -> None:
        self.paths = list(dict.fromkeys(Path(p) for p in paths))
        self.min_free_bytes = min_free_bytes
        self.interruption = interruption
        self.every_s = every_s
        self._last = 0.0

    def low(self) -> tuple[Path, int] | None:
        """The first path with too little free space, and how much it has."""
        for path in self.paths:
            existing = next((p for p in (path, *path.parents) if p.exists()), None)
            if existing is None:
                continue
            free = shutil.disk_usage(existing).free
            if free < self.min_free_bytes:
                return path, free
        return None

    def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
        now = time.monotonic()
        if now - self._last < self.every_s or self.interruption.reason:
            return
        self._last = now
        found = self.low()
        if found is not None:
            path, free = found
            reason = (
                f"no space left on {path}: {free / 2**20:.0f} MiB free, the search stops "
                f"below {self.min_free_bytes / 2**20:.0f} MiB (--min-free-disk)"
            )
            logger.error("%s; stopping the search so that --resume can continue it", reason)
            self.interruption.request(reason)
