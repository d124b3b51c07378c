"""How a trial ended, and whether an error says a disk is full, decided in one place;
dependency-free.

========================  =========  ====================================================
``Outcome``               MLflow     when
========================  =========  ====================================================
``finished``              FINISHED   it trained every epoch and reported its ensemble
``stopped_early``         FINISHED   ASHA stopped it (the search completed without it):
                                     nothing went wrong, it lost
``failed``                FAILED     it raised, or its loss diverged, after its retries
``search_ended``          KILLED     the search stopped first (time budget, Ctrl+C)
``abandoned``             KILLED     its driver died before Tune saved it; the resumed
                                     search ran another trial in its place
========================  =========  ====================================================

Two outcomes share ``FINISHED`` and three ``KILLED``: whatever reads a trial's end back
reads its ``outcome`` tag (``gridsearch.tracking.OUTCOME_TAG``), never its status.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from enum import StrEnum

from trainables import names

__all__ = ["Outcome", "classify", "is_disk_full"]

_DISK_FULL = ("no space left on device", "database or disk is full", "disk quota exceeded")


class Outcome(StrEnum):
    FINISHED = "finished"
    STOPPED_EARLY = "stopped_early"
    FAILED = "failed"
    SEARCH_ENDED = "search_ended"
    ABANDONED = "abandoned"

    @property
    def status(self) -> str:
        """The MLflow run status that goes with it: KILLED only for a trial cut short."""
        if self in (Outcome.FINISHED, Outcome.STOPPED_EARLY):
            return "FINISHED"
        return "FAILED" if self is Outcome.FAILED else "KILLED"


def classify(metrics: Mapping[str, object], *, error: bool, search_complete: bool) -> Outcome:
    """A trial's outcome from its last report: ``error`` when Tune recorded one;
    ``search_complete`` when no trial is left to run, so that a trial without its
    ensemble was stopped by the scheduler rather than by the search's end."""
    if error:
        return Outcome.FAILED
    if names.is_finished(metrics):
        return Outcome.FINISHED
    return Outcome.STOPPED_EARLY if search_complete else Outcome.SEARCH_ENDED


def is_disk_full(error: BaseException | str | None) -> bool:
    """Whether an error (or a trial's error text) says a disk is full."""
    if error is None:
        return False
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return any(phrase in str(error).lower() for phrase in _DISK_FULL)
