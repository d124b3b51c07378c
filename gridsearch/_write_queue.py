"""Writes to a tracking store that may go away: queued, applied in order, retried.

Training never waits for MLflow. A write that fails while the store does not answer
stays at the head of the queue and is retried every ``retry_every_s`` (and at every new
write); one the store answers but refuses is logged and dropped, since retrying cannot
help, unless it failed for a full disk (``is_disk_full``), which frees up. ``flush(wait_s)``
waits up to ``wait_s`` for the store to come back. Nothing here
knows Tune or MLflow: the store is a ``reachable()`` probe and writes are callables.

    queue = WriteQueue(reachable=store_answers, where="http://mlflow:5000")
    queue.submit("epoch 3 of trial a", lambda: client.log_batch(...))
    queue.flush(wait_s=300)  # True when every write went through
"""

from __future__ import annotations

import errno
import logging
import time
from collections import deque
from collections.abc import Callable

from storage.cli import error_line

__all__ = ["WriteQueue", "is_disk_full"]

logger = logging.getLogger(__name__)

Write = Callable[[], object]  # its result is ignored
_DISK_FULL = ("no space left on device", "database or disk is full", "disk quota exceeded")


def is_disk_full(error: BaseException | str | None) -> bool:
    """Whether an error (or a trial's error text) says a disk is full."""
    if error is None:
        return False
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return any(phrase in str(error).lower() for phrase in _DISK_FULL)


class WriteQueue:
    def __init__(
        self, reachable: Callable[[], bool], where: str, *, retry_every_s: float = 5.0
    ) -> None:
        self.reachable = reachable  # does the store answer at all?
        self.where = where  # the store, for log lines
        self.retry_every_s = retry_every_s
        self._pending: deque[tuple[str, Write]] = deque()
        self._down_since: float | None = None
        self._last_try = 0.0

    @property
    def pending(self) -> int:
        """Writes not yet accepted by the store."""
        return len(self._pending)

    @property
    def store_away(self) -> bool:
        return self._down_since is not None

    def submit(self, what: str, write: Write) -> None:
        """Queue ``write`` (``what`` names it in log lines) and try everything queued."""
        self._pending.append((what, write))
        self.flush()

    def flush(self, wait_s: float = 0.0) -> bool:
        """Apply the queued writes in order; while the store is away, retry every
        ``retry_every_s`` until ``wait_s`` has passed. True when nothing is left."""
        deadline = time.monotonic() + wait_s
        while self._pending:
            now = time.monotonic()
            if self._down_since is not None and now - self._last_try < self.retry_every_s:
                if now >= deadline:
                    return False
                time.sleep(min(self.retry_every_s - (now - self._last_try), deadline - now))
                continue
            self._try_head()
        return True

    def _try_head(self) -> None:
        self._last_try = time.monotonic()
        what, write = self._pending[0]
        try:
            write()
        except Exception as err:  # MLflow raises many kinds for a store that is away
            if self.reachable() and not is_disk_full(err):
                logger.error("MLflow refused %s (%s); skipped", what, error_line(err))
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
            return
        self._pending.popleft()
        if self._down_since is not None:
            logger.warning(
                "MLflow at %s is back after %.0f s; writing the buffered records",
                self.where,
                time.monotonic() - self._down_since,
            )
            self._down_since = None
