"""The last whole copy of each of Tune's state files, kept while Tune runs.

Tune rewrites its experiment state, searcher state and search generator state in place
every few seconds, and a write that a full disk (or a crash) cuts short leaves a file no
``--resume`` can read. The free-space guard's reserve (``_interrupt.Reserve``) makes
room for Tune's last save, but only on a disk with room for it; so, whatever the disk's
size, ``WholeCopies`` (a Tune callback) copies each of them, once whole and of Tune's
shape, into the experiment's ``.whole/`` folder each time Tune has saved it anew
(written atomically: a copy a full disk stops is not made, and the previous one stays).
A ``--resume`` that finds a state file damaged puts its copy in its place
(``_damage.restore_whole_copies``) and says so. The copies are a few kilobytes to
megabytes, as the files are.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from ray.tune import Callback

from gridsearch._damage import TUNE_STATE_FILES, WHOLE_COPIES, state_bytes_problem
from gridsearch._state_files import read_state
from storage import write_bytes_atomic

__all__ = ["WholeCopies"]

logger = logging.getLogger(__name__)


class WholeCopies(Callback):
    """Copies the Tune experiment ``folder``'s state files when Tune saved them anew
    (looked at every ``every_s`` at most, and at the experiment's end, after Tune's last
    save); see the module docstring."""

    def __init__(self, folder: Path, every_s: float = 2.0) -> None:
        self.folder = folder
        self.every_s = every_s
        self._copied: dict[str, tuple[str, int, int]] = {}  # pattern -> (name, mtime, size)
        self._last = 0.0

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self.copy()

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self.copy()

    def copy(self) -> list[Path]:
        """Copy each state file that changed since its last copy and is whole; returns
        the copies made. A copy that cannot be written (a full disk) leaves the last one."""
        made = []
        for pattern in TUNE_STATE_FILES:
            found = sorted(self.folder.glob(pattern))
            if not found:
                continue
            newest = found[-1]
            try:
                info = newest.stat()
                seen = (newest.name, info.st_mtime_ns, info.st_size)
                if self._copied.get(pattern) == seen:
                    continue
                # read once: the bytes checked are the bytes copied (Tune rewrites the
                # file in place; a second read could meet a write half done)
                data = read_state(newest)
                if isinstance(data, str) or state_bytes_problem(data, pattern):
                    continue  # not whole (Tune is writing it, or a full disk cut it short)
                copies = self.folder / WHOLE_COPIES
                copies.mkdir(exist_ok=True)
                write_bytes_atomic(copies / newest.name, data)
            except OSError as err:  # a full disk: the last copy stays the last whole one
                logger.debug("no copy of %s: %s", newest, err)
                continue
            self._copied[pattern] = seen
            for older in copies.glob(pattern):
                if older.name != newest.name:
                    older.unlink(missing_ok=True)
            made.append(copies / newest.name)
        return made
