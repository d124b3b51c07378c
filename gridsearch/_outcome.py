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

An outcome is where a trial ended, not how it got there: a trial that failed, was retried
from its checkpoint (``--max-failures``) and then finished is ``finished`` with its
``Failures`` beside it (Tune's count, kept across resumes, and the last one's cause),
which the progress, the summary and MLflow say.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from trainables import names

__all__ = ["Failures", "Outcome", "classify", "failures_of", "is_disk_full", "trial_error"]

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


@dataclass(frozen=True)
class Failures:
    """How often a trial failed (each failure but one that ended it was retried) and
    the last failure's cause, in a line."""

    count: int = 0
    last: str = ""

    def retries(self, failed: bool) -> int:
        """The retries they took: every failure, but the last of a trial that failed."""
        return max(self.count - (1 if failed else 0), 0)


_FAILURE_HEADER = "Failure # "  # Tune's error.txt: a section per failure, this line first


def last_failure(text: str, limit: int = 200) -> str:
    """The cause of the last failure in a trial's error text (Tune's ``error.txt``: a
    section per failure, its traceback ending with the cause), in one line."""
    section = text.rsplit(_FAILURE_HEADER, 1)[-1]
    lines = [line.strip() for line in section.strip().splitlines() if line.strip()]
    if lines and lines[0][:1].isdigit() and "occurred at" in lines[0]:
        lines = lines[1:]  # the section's header
    return lines[-1][:limit] if lines else ""


def trial_error(trial: Any) -> str | None:
    """A Tune trial's error text as Tune wrote it (its ``error.txt``): the driver's own
    copy, written at once, else the one in its folder (a trial read back from a saved
    experiment), else the storage path's (``Trial.get_error``, copied there only every
    few seconds); None where it has none."""
    for file in (getattr(trial, "error_file", None), _in_folder(trial)):
        if file is not None and os.path.isfile(file):
            with open(file, encoding="utf-8", errors="replace") as handle:
                return handle.read()
    try:
        error = trial.get_error()
    except Exception:  # a storage path that cannot be read: no text
        return None
    return str(error) if error is not None else None


def _in_folder(trial: Any) -> str | None:
    path = getattr(trial, "path", None)
    if not path or "://" in str(path):
        return None
    return str(Path(path) / "error.txt")


def failures_of(trial: Any) -> Failures:
    """A Tune trial's failures: Tune's count (``num_failures``, saved with the experiment;
    a failure for a full disk is not counted, ``_interrupt``) and the last one's cause."""
    metadata = getattr(trial, "run_metadata", None)
    count = getattr(metadata, "num_failures", 0)
    count = count if isinstance(count, int) and count > 0 else 0
    if not count:
        return Failures()
    text = trial_error(trial)
    return Failures(count, last_failure(text) if text else "")
