"""Writes to a tracking store that may go away: queued, applied in order, retried.

Training never waits for MLflow. A write that fails while the store does not answer
stays at the head of the queue and is retried every ``retry_every_s`` (and at every new
write); one the store answers but refuses is logged and dropped, since retrying cannot
help, unless it failed for a full disk (``is_disk_full``), which frees up: it stays too,
and ``disk_full`` says why. ``flush(wait_s)`` waits up to ``wait_s`` for the store to come
back, but not for a full disk: it tries once more and returns. ``why_pending`` says in
a line why writes are left, and ``said`` what the writes went through (waited for the
store and went through, refused), for the search's summary. Nothing here knows Tune or
MLflow: the store is a ``reachable()`` probe and writes are callables. Each write runs
under ``guard`` (the driver's: a stop that comes meanwhile waits for its end).

    queue = WriteQueue(reachable=store_answers, where="http://mlflow:5000")
    queue.submit("epoch 3 of trial a", lambda: client.log_batch(...))
    queue.flush(wait_s=300)  # True when every write went through
    queue.why_pending(300)  # else why not: "no space left for ..." or "did not come back ..."
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from gridsearch._outcome import is_disk_full
from storage.cli import error_line

__all__ = ["WriteQueue"]

logger = logging.getLogger(__name__)

Write = Callable[[], object]  # its result is ignored


def _disk_full_line(err: BaseException) -> str:
    """The line of an error that says the disk is full, after the error's type (a
    database error's first line may be about something else)."""
    lines = str(err).strip().splitlines()
    said = next((line for line in lines if is_disk_full(line)), lines[0] if lines else "")
    return f"{type(err).__name__}: {said.strip()[:300]}" if said else type(err).__name__


class WriteQueue:
    def __init__(
        self, reachable: Callable[[], bool], where: str, *, retry_every_s: float = 5.0
    ) -> None:
        self.reachable = reachable  # does the store answer at all?
        self.where = where  # the store, for log lines
        self.retry_every_s = retry_every_s
        # the error of the last write refused for a full disk, while none went through since
        self.disk_full: str | None = None
        self._pending: deque[tuple[str, Write]] = deque()
        # what the writes went through: waited for the store (how many writes, how many
        # times it was away or full, for how long in all), refused and dropped
        self.waited = 0
        self.outages = 0
        self.away_s = 0.0
        self.refused = 0
        self._down_since: float | None = None
        self._last_try = 0.0
        # what each write runs under, whole: the bookkeeping after it included
        self.guard: Callable[[], AbstractContextManager[object]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (Tune's ``tuner.pkl`` keeps the callbacks) without ``guard``, the
        driver's own."""
        return {**self.__dict__, "guard": None}

    @property
    def pending(self) -> int:
        """Writes not yet accepted by the store."""
        return len(self._pending)

    def submit(self, what: str, write: Write) -> None:
        """Queue ``write`` (``what`` names it in log lines) and try everything queued."""
        self._pending.append((what, write))
        self.flush()

    def flush(self, wait_s: float = 0.0) -> bool:
        """Apply the queued writes in order; while the store is away, retry every
        ``retry_every_s`` until ``wait_s`` has passed. A full disk is not waited for:
        with ``wait_s``, the head is tried once more at once, and False returned while
        the disk is still full. True when nothing is left."""
        deadline = time.monotonic() + wait_s
        if wait_s > 0 and self.disk_full is not None:
            self._last_try = 0.0  # space may have been freed since: try now
        while self._pending:
            now = time.monotonic()
            if self._down_since is not None and now - self._last_try < self.retry_every_s:
                if now >= deadline or self.disk_full is not None:
                    return False
                time.sleep(min(self.retry_every_s - (now - self._last_try), deadline - now))
                continue
            self._try_head()
        return True

    def why_pending(self, wait_s: float) -> str:
        """Why writes are still queued after ``flush(wait_s)`` returned False: the store's
        disk is full, or the store did not come back within ``wait_s``."""
        if self.disk_full is not None:
            return f"no space left for the MLflow tracking store at {self.where} ({self.disk_full})"
        return f"the MLflow tracking store at {self.where} did not come back within {wait_s:g} s"

    def said(self) -> str | None:
        """What the writes went through, in a line (None: every one went through at its
        first try): how many waited for the store to come back (or to have space again)
        and then went through, and how many it refused (each logged, and dropped)."""
        parts = []
        if self.waited:
            times = "once" if self.outages == 1 else f"{self.outages} times"
            parts.append(
                f"{self.waited} write(s) waited for the store, away or full {times} "
                f"({self.away_s:.0f} s in all), and then went through"
            )
        if self.refused:
            parts.append(f"{self.refused} write(s) refused by it and skipped (logged)")
        if self.pending:
            parts.append(f"{self.pending} write(s) still waiting")
        return f"MLflow at {self.where}: " + "; ".join(parts) if parts else None

    def _try_head(self) -> None:
        with self.guard() if self.guard else contextlib.nullcontext():
            self._try(*self._pending[0])

    def _try(self, what: str, write: Write) -> None:
        self._last_try = time.monotonic()
        try:
            write()
        except Exception as err:  # MLflow raises many kinds for a store that is away
            self._failed(what, err)
            return
        if self._down_since is not None:
            self.outages += 1
            self.away_s += time.monotonic() - self._down_since
            self.waited += len(self._pending)  # this one, and those queued behind it
        self._pending.popleft()
        if self._down_since is not None:
            logger.warning(
                "MLflow at %s %s after %.0f s; writing the buffered records",
                self.where,
                "has space again" if self.disk_full is not None else "is back",
                time.monotonic() - self._down_since,
            )
            self._down_since = None
        self.disk_full = None

    def _failed(self, what: str, err: Exception) -> None:
        """The head write failed: kept for a full disk or a store away, else dropped."""
        if is_disk_full(err):
            if self.disk_full is None:
                logger.warning(
                    "no space left for MLflow at %s (%s); training goes on and its records "
                    "wait here, retried every %.0f s",
                    self.where,
                    _disk_full_line(err),
                    self.retry_every_s,
                )
            self.disk_full = _disk_full_line(err)
            if self._down_since is None:
                self._down_since = time.monotonic()
        elif self.reachable():
            logger.error("MLflow refused %s (%s); skipped", what, error_line(err))
            self.refused += 1
            self._pending.popleft()
        elif self._down_since is None:
            self._down_since = time.monotonic()
            logger.warning(
                "MLflow at %s is not answering (%s); training goes on and its records "
                "wait here, retried every %.0f s",
                self.where,
                error_line(err),
                self.retry_every_s,
            )
