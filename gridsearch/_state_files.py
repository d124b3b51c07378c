"""What is wrong with one of a search's state files, said, never raised: a file that is
not whole (empty, cut short, not a pickle or JSON or sqlite database, past sqlite's
integrity check), or not of the shape Tune, Optuna or MLflow writes. Each reads only
(sqlite opened read-only, pickles walked with ``pickletools``, which runs nothing);
``gridsearch._damage`` turns what they say into one line with how to recover."""

from __future__ import annotations

import json
import pickletools
import sqlite3
from collections.abc import Callable
from pathlib import Path

from gridsearch._pickle_shape import pickle_shape

__all__ = [
    "MAX_PICKLE_DEPTH",
    "SQLITE_MAGIC",
    "STATE_KEYS",
    "has_mlflow_tables",
    "has_study",
    "json_file_problem",
    "json_problem",
    "pickle_file_problem",
    "pickle_problem",
    "read_state",
    "shape_problem",
    "shape_problem_of",
    "sqlite_problem",
    "trials_problem",
]

SQLITE_MAGIC = b"SQLite format 3\x00"
_MAX_STATE_BYTES = 1 << 30  # Tune's state files are KB to MB; larger is not read
_MLFLOW_TABLES = ("experiments", "runs", "metrics", "params", "tags")
# How deeply a state pickle may nest: Tune's own are 12 to 30 deep; deeper structures
# (Python's recursion limit is 1,000 frames) fail in the code that walks them later
MAX_PICKLE_DEPTH = 200
# The keys Tune reads back from each of its state files (Ray 2.60's tuner_internal,
# search_generator, tune_controller): one without them is not Tune's
STATE_KEYS = {
    "tuner.pkl": ("_tune_config", "_run_config"),
    "searcher-state-*.pkl": (),
    "search_gen_state-*.json": ("counter", "total_samples", "finished"),
}
_TRIAL_STATUSES = ("PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR")


def shape_problem(path: Path, keys: tuple[str, ...]) -> str | None:
    """What in the whole pickle at ``path`` is not of the shape Tune writes (a dictionary
    holding ``keys``, nested at most ``MAX_PICKLE_DEPTH`` deep), or None."""
    data = read_state(path)
    return shape_problem_of(data, keys) if isinstance(data, bytes) else None


def shape_problem_of(data: bytes, keys: tuple[str, ...]) -> str | None:
    """``shape_problem`` of a pickle's bytes, read once by the caller."""
    shape = pickle_shape(data)
    if shape is None:
        return None  # not whole: said by pickle_problem
    if shape.kind != "dict":
        return f"it holds a {shape.kind}, not Tune's dictionary"
    missing = [key for key in keys if key not in shape.keys]
    if missing:
        return f"no key {missing[0]!r}, which Tune reads back"
    if shape.depth > MAX_PICKLE_DEPTH:
        return f"nested {shape.depth:,} deep; Tune's are at most {MAX_PICKLE_DEPTH}"
    return None


def trials_problem(state: object) -> str | None:
    if not isinstance(state, dict):
        return f"a JSON {type(state).__name__}, expected an object"
    for key, kind in (("trial_data", list), ("runner_data", dict), ("stats", dict)):
        if not isinstance(state.get(key), kind):
            return f"field {key!r}: expected a JSON {kind.__name__}"
    for number, entry in enumerate(state["trial_data"]):
        where = f"trial_data[{number}]"
        if not (
            isinstance(entry, list) and len(entry) == 2 and all(isinstance(e, str) for e in entry)
        ):
            return f"{where}: expected the trial's state and its metadata, two JSON texts"
        try:
            trial, metadata = json.loads(entry[0]), json.loads(entry[1])
        except (ValueError, RecursionError):
            return f"{where}: not JSON"
        problem = _trial_problem(trial, metadata)
        if problem is not None:
            return f"{where}: {problem}"
    return None


def _trial_problem(trial: object, metadata: object) -> str | None:
    if not isinstance(trial, dict) or not isinstance(metadata, dict):
        return "expected JSON objects"
    trial_id = trial.get("trial_id")
    if not (isinstance(trial_id, str) and trial_id.replace("_", "").isalnum()):
        return f"field 'trial_id': {_shown(trial_id)}, expected letters, digits and '_'"
    if trial.get("status") not in _TRIAL_STATUSES:
        known = ", ".join(_TRIAL_STATUSES)
        return f"field 'status': {_shown(trial.get('status'))}, expected one of {known}"
    for key in ("num_failures", "num_failures_after_restore"):
        value = metadata.get(key, 0)
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            return f"field {key!r}: {_shown(value)}, expected a count"
    last = metadata.get("last_result", {})
    if not isinstance(last, dict):
        return f"field 'last_result': {_shown(last)}, expected an object"
    for key in ("error_filename", "pickled_error_filename"):
        if not isinstance(metadata.get(key), str | None):
            return f"field {key!r}: {_shown(metadata.get(key))}, expected a file name"
    return None


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else f"{text[:30]}... ({type(value).__name__})"


def sqlite_problem(
    path: Path, content_problem: Callable[[sqlite3.Connection], str | None]
) -> str | None:
    """What is wrong with the sqlite file ``path`` (opened read-only), or None."""
    try:
        with path.open("rb") as handle:
            head = handle.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        return "missing"
    except OSError as err:
        return f"cannot be read: {err.strerror or err}"
    if not head:
        return "empty: 0 bytes"
    if head != SQLITE_MAGIC:
        return "not an sqlite database"
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as err:
        return f"sqlite: {err}"
    try:
        row = db.execute("PRAGMA quick_check").fetchone()
        if row is None or row[0] != "ok":
            return f"sqlite's integrity check: {str(row[0] if row else 'no answer')[:120]}"
        return content_problem(db)
    except sqlite3.Error as err:
        return f"sqlite: {err}"
    finally:
        db.close()


def has_study(db: sqlite3.Connection, study: str) -> str | None:
    try:
        row = db.execute("SELECT 1 FROM studies WHERE study_name = ?", (study,)).fetchone()
    except sqlite3.OperationalError:
        return "no Optuna tables"
    return None if row is not None else f"no study named {study!r}"


def has_mlflow_tables(db: sqlite3.Connection) -> str | None:
    names = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    missing = [t for t in _MLFLOW_TABLES if t not in names]
    return f"no MLflow table {missing[0]!r}" if missing else None


def read_state(path: Path) -> bytes | str:
    """The bytes of a state file, or what is wrong with reading it. A caller that checks
    a file another process may be rewriting checks (and copies) these bytes, read once,
    not the file again."""
    try:
        size = path.stat().st_size
        if size == 0:
            return "empty: 0 bytes"
        if size > _MAX_STATE_BYTES:
            return f"{size:,} bytes, larger than a state file can be"
        data = path.read_bytes()
    except OSError as err:
        return f"cannot be read: {err.strerror or err}"
    return data if data else "empty: 0 bytes"  # emptied since its size was read


def json_file_problem(path: Path) -> str | None:
    data = read_state(path)
    return data if isinstance(data, str) else json_problem(data)


def json_problem(data: bytes) -> str | None:
    """What is wrong with a JSON state file's bytes: cut short or not JSON; None if whole."""
    try:
        json.loads(data)
    except (ValueError, RecursionError) as err:
        if not data.rstrip().endswith((b"}", b"]")):
            return f"cut short at {len(data):,} bytes"
        return f"not valid JSON: {str(err)[:120]}"
    return None


def pickle_file_problem(path: Path) -> str | None:
    """What is wrong with the pickle at ``path`` (its opcodes walked, nothing run)."""
    data = read_state(path)
    return data if isinstance(data, str) else pickle_problem(data)


def pickle_problem(data: bytes) -> str | None:
    """What is wrong with a pickle's bytes (its opcodes walked, nothing run), or None."""
    try:
        for _ in pickletools.genops(data):
            pass
    except Exception as err:  # genops raises ValueError and others on a broken stream
        return f"not a whole pickle: {str(err)[:120] or type(err).__name__}"
    return None
