"""A search's record on disk (``RunsLayout.record``: ``RUNS_DIR/searches/NAME.json``).

It holds the settings the search started with (``asdict(SearchSettings)``; the number
of trials is the last one it was asked for, as a ``--resume --num-samples`` that extends
the search rewrites it) and when the search started, by which ``analysis.report`` finds
the latest search of a runs directory. Dependency-free: no Ray, no MLflow.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from gridsearch._layout import RunsLayout
from storage import write_text_atomic

__all__ = ["STARTED", "latest_search", "started_at", "write_record"]

# The record's start time (ISO 8601 with the UTC offset); not a SearchSettings field.
# Records written before it existed started when their file was written (never rewritten).
STARTED = "started_at"
_MAX_RECORD_BYTES = 1 << 20  # a record is a few KB; a bigger file is not read for its time


def write_record(path: Path, values: Mapping[str, Any]) -> None:
    """Write ``values`` as the record at ``path`` atomically (a reader never sees half
    of it), keeping the start time of a record already there; a record that already
    says the same is left untouched."""
    started = _recorded_start(path) if path.exists() else None
    record = {**values, STARTED: started or time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if started is not None and _read(path) == record:
        return
    write_text_atomic(path, json.dumps(record, indent=2) + "\n")


def started_at(path: Path) -> float:
    """When the search of the record at ``path`` started (seconds since the epoch): its
    ``started_at``, else (an older or damaged record) the file's modification time."""
    text = _recorded_start(path)
    if text is not None:
        try:
            return datetime.fromisoformat(text).timestamp()
        except ValueError:
            pass
    return path.stat().st_mtime


def latest_search(layout: RunsLayout) -> tuple[str, float] | None:
    """The experiment name and start time of the search that started last in the runs
    directory, by its record; None when it holds no search."""
    folder = layout.record("-").parent
    found = []
    for path in folder.glob("*.json") if folder.is_dir() else ():
        try:
            if path.is_file():
                found.append((started_at(path), path.stem))
        except OSError:  # removed meanwhile, or unreadable: not a search to report
            continue
    if not found:
        return None
    started, name = max(found)
    return name, started


def _recorded_start(path: Path) -> str | None:
    """The record's ``started_at`` text, or None (absent, unreadable, not a record)."""
    record = _read(path)
    value = record.get(STARTED) if isinstance(record, dict) else None
    return value if isinstance(value, str) else None


def _read(path: Path) -> Any:
    """The record's JSON, or None when it cannot be read (or is too big to be one)."""
    try:
        if path.stat().st_size > _MAX_RECORD_BYTES:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
