"""A ``--resume``'s state files checked before Ray starts: each damaged one (truncated,
emptied, overwritten: a disk that filled, a crash mid-write, a bad copy) is named in one
line with how to recover, instead of a traceback from deep inside Tune, Optuna or MLflow.

One function per state file, each reading only (sqlite opened read-only, pickles walked
with ``pickletools``, which runs nothing):

- ``check_study``: the Optuna study (sqlite): a database, intact, holding the study;
- ``check_tracking``: the MLflow tracking store (sqlite), when it exists: a database,
  intact, with MLflow's tables;
- ``check_tune_state``: the Tune experiment: its newest ``experiment_state-*.json``
  parses, its ``tuner.pkl``, newest ``searcher-state-*.pkl`` and newest
  ``search_gen_state-*.json`` (a pickle, despite its name) are whole pickles; and each
  is of the shape Tune writes (``_check_shape``, ``_check_trials``): a dictionary with
  the keys Tune reads back, nested no deeper than ``MAX_PICKLE_DEPTH``, every trial of
  the experiment state with an id, a status Tune knows, a count of failures and a last
  result of their types;
- ``restore_whole_copies``: a Tune state file that is damaged is replaced by its last
  whole copy, which the search keeps in the experiment's ``.whole/`` folder while Tune
  runs (``gridsearch._whole``): the damaged one moved aside (``NAME.damaged``);
- ``repair_error_files``: a trial's ``error.pkl`` cut short (Tune writes it in place, and
  reads it back with the results) is removed; its ``error.txt`` keeps the error.

The search record is checked where it is read (``settings``). ``check_resume_state``
runs them all, once, where a ``--resume`` begins.
"""

from __future__ import annotations

import json
import logging
import os
import pickletools
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gridsearch._layout import sqlite_file
from gridsearch._pickles import pickle_shape
from storage import write_bytes_atomic

if TYPE_CHECKING:
    from gridsearch.settings import SearchSettings

__all__ = [
    "DamagedState",
    "check_resume_state",
    "check_study",
    "check_tracking",
    "check_tune_state",
    "drop_cut_short_pickle",
    "repair_error_files",
]

logger = logging.getLogger(__name__)

SQLITE_MAGIC = b"SQLite format 3\x00"
_MAX_STATE_BYTES = 1 << 30  # Tune's state files are KB to MB; larger is not read
_MLFLOW_TABLES = ("experiments", "runs", "metrics", "params", "tags")
# How deeply a state pickle may nest: Tune's own are 12 to 30 deep; deeper structures
# (Python's recursion limit is 1,000 frames) fail in the code that walks them later
MAX_PICKLE_DEPTH = 200
# The keys Tune reads back from each of its state files (Ray 2.60's tuner_internal,
# search_generator, tune_controller): one without them is not Tune's
_STATE_KEYS = {
    "tuner.pkl": ("_tune_config", "_run_config"),
    "searcher-state-*.pkl": (),
    "search_gen_state-*.json": ("counter", "total_samples", "finished"),
}
_TRIAL_STATUSES = ("PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR")


class DamagedState(ValueError):
    """A state file a ``--resume`` needs is damaged; the message is one line: the file,
    what is wrong with it, and how to recover."""


def check_resume_state(settings: SearchSettings, *, repair: bool = True) -> list[str]:
    """Every state file a ``--resume`` of ``settings`` reads, before Ray starts: raises
    ``SearchError`` (one line) for the first damaged one. With ``repair``, a damaged Tune
    state file whose last whole copy is kept is replaced by it (``restore_whole_copies``;
    returns a line each) and trial error files cut short are removed
    (``repair_error_files``); without, nothing is written."""
    from gridsearch.settings import SearchError

    said: list[str] = []
    try:
        study = sqlite_file(settings.optuna_storage)
        if study is not None:
            check_study(study, settings.experiment, settings.experiment)
        tracking = sqlite_file(settings.tracking_uri)
        if tracking is not None:
            check_tracking(tracking, settings.experiment)
        if "://" not in settings.storage_path:
            folder = Path(settings.experiment_path)
            check_tune_state(folder, settings.experiment)
            if repair and folder.is_dir():
                said += restore_whole_copies(folder)
            for removed in repair_error_files(folder) if repair else ():
                logger.warning("removed %s: cut short (its error.txt keeps the error)", removed)
    except DamagedState as err:
        raise SearchError(str(err)) from None
    return said


def check_study(path: Path, study: str, experiment: str) -> None:
    """The Optuna study ``study`` in the sqlite file ``path``: an intact database that
    holds it. ``DamagedState`` otherwise."""
    how = (
        f"restore it from a backup, or salvage it with `sqlite3 {path} .recover | sqlite3 "
        f"{path}.recovered` and move {path.name}.recovered in its place; every finished "
        f"trial's parameters and results are also in MLflow (experiment {experiment!r})"
    )
    problem = _sqlite_problem(path, lambda db: _has_study(db, study))
    if problem is not None:
        raise DamagedState(f"the Optuna study {path} is damaged ({problem}): {how}")


def check_tracking(path: Path, experiment: str) -> None:
    """The MLflow tracking store at the sqlite file ``path``, when there is one: an
    intact database with MLflow's tables. ``DamagedState`` otherwise."""
    if not path.exists():
        return  # MLflow creates it; the resume records what Tune holds
    how = (
        f"restore it from a backup, or salvage it with `sqlite3 {path} .recover | sqlite3 "
        f"{path}.recovered` and move that in its place; or move it aside and `--resume` "
        f"records every epoch Tune holds of {experiment!r} into a new one (other "
        "experiments' runs stay in the old file)"
    )
    problem = _sqlite_problem(path, _has_mlflow_tables)
    if problem is not None:
        raise DamagedState(f"the MLflow tracking store {path} is damaged ({problem}): {how}")


def check_tune_state(folder: Path, experiment: str) -> None:
    """The Tune experiment at ``folder`` (local): its newest state files parse and its
    pickles are whole, each of Tune's shape; where one is not and its last whole copy is
    there (``WHOLE_COPIES``), the copy is what the resume reads (``restore_whole_copies``
    puts it in place). A missing experiment is left to the resume to report."""
    if not folder.is_dir():
        return
    states = sorted(folder.glob(_STATE))
    if not states:
        return
    newest = _read_back(folder, _STATE)
    assert newest is not None
    problem = _json_problem(newest)
    if problem is not None:
        older = next((s for s in reversed(states[:-1]) if _json_problem(s) is None), None)
        how = (
            f"move it aside (e.g. `mv {newest} {newest}.damaged`) and `--resume` continues "
            f"from the previous state, {older.name} (the trials of the run after it start "
            "again from their checkpoints)"
            if older is not None
            else "no earlier state file is left to fall back to: start a new search with "
            f"`--warm-start {experiment}`, which begins from its finished trials"
        )
        raise DamagedState(f"the Tune experiment state {newest} is damaged ({problem}): {how}")
    _check_trials(newest, experiment)
    # Tune pickles the search generator's state, though it names the file .json
    for pattern in ("search_gen_state-*.json", "tuner.pkl", "searcher-state-*.pkl"):
        _check_newest(folder, pattern, experiment)


# -- the last whole copy of each state file -------------------------------------------

# Where a search keeps the last whole copy of each of Tune's state files (in the Tune
# experiment's folder; gridsearch._whole makes them while Tune runs): a state file cut
# short (a full disk, a crash mid-write) is never all there is.
WHOLE_COPIES = ".whole"
_STATE = "experiment_state-*.json"
TUNE_STATE_FILES = (_STATE, "search_gen_state-*.json", "searcher-state-*.pkl", "tuner.pkl")


def state_problem(path: Path, pattern: str) -> str | None:
    """What is wrong with the Tune state file at ``path`` (of ``pattern``): not whole,
    or not of the shape Tune writes; None when it is whole and Tune's."""
    if pattern == _STATE:
        problem = _json_problem(path)
        if problem is None:
            problem = _trials_problem(json.loads(path.read_bytes()))
        return problem
    return _pickle_problem(path) or _shape_problem(path, _STATE_KEYS[pattern])


def whole_copy(folder: Path, pattern: str) -> Path | None:
    """The last whole copy of the newest state file of ``pattern``, if one is kept."""
    found = sorted((folder / WHOLE_COPIES).glob(pattern))
    return found[-1] if found else None


def _read_back(folder: Path, pattern: str) -> Path | None:
    """The file of ``pattern`` a resume reads: the newest, unless it is damaged and its
    last whole copy is kept (then the copy, which ``restore_whole_copies`` puts in its
    place)."""
    found = sorted(folder.glob(pattern))
    newest = found[-1] if found else None
    if newest is not None and state_problem(newest, pattern) is None:
        return newest
    copy = whole_copy(folder, pattern)
    if copy is not None and state_problem(copy, pattern) is None:
        return copy
    return newest


def restore_whole_copies(folder: Path) -> list[str]:
    """Put the last whole copy in place of each newest state file that is damaged: the
    damaged file moved aside (``NAME.damaged``), the copy written under its own name (an
    older file's, where Tune wrote a newer one since, which is the newest then). Returns
    a line per file restored."""
    said = []
    for pattern in TUNE_STATE_FILES:
        found = sorted(folder.glob(pattern))
        newest = found[-1] if found else None
        if newest is None or state_problem(newest, pattern) is None:
            continue
        copy = whole_copy(folder, pattern)
        if copy is None or state_problem(copy, pattern) is not None:
            continue  # nothing to restore: check_tune_state says what to do
        problem = state_problem(newest, pattern)
        os.replace(newest, newest.with_name(f"{newest.name}.damaged"))
        write_bytes_atomic(folder / copy.name, copy.read_bytes())
        said.append(
            f"{newest} was damaged ({problem}): moved aside to {newest.name}.damaged, its "
            f"last whole copy ({copy.name}) in its place"
        )
    return said


def repair_error_files(folder: Path) -> list[Path]:
    """Remove the trials' ``error.pkl`` files under the Tune experiment ``folder`` that
    are cut short (Tune would fail reading them back); returns them. A trial's
    ``error.txt`` keeps the error's text, which Tune reports instead."""
    found = folder.glob("*/error.pkl") if folder.is_dir() else ()
    return [path for path in found if drop_cut_short_pickle(path)]


def drop_cut_short_pickle(path: Path) -> bool:
    """Remove the pickle at ``path`` when it is not whole (empty, cut short, not a
    pickle); True when removed."""
    if not path.is_file() or _pickle_problem(path) is None:
        return False
    try:
        path.unlink()
    except OSError:
        return False
    return True


def _check_newest(folder: Path, pattern: str, experiment: str) -> None:
    path = _read_back(folder, pattern)
    if path is None:
        return
    problem = _pickle_problem(path) or _shape_problem(path, _STATE_KEYS[pattern])
    if problem is not None:
        raise DamagedState(
            f"the Tune experiment file {path} is damaged ({problem}): restore it from a "
            f"backup, or start a new search with `--warm-start {experiment}`, which begins "
            "from its finished trials"
        )


def _shape_problem(path: Path, keys: tuple[str, ...]) -> str | None:
    """What in the whole pickle at ``path`` is not of the shape Tune writes (a dictionary
    holding ``keys``, nested at most ``MAX_PICKLE_DEPTH`` deep), or None."""
    data = _read_state(path)
    shape = pickle_shape(data) if isinstance(data, bytes) else None
    if shape is None:
        return None  # not whole: said by _pickle_problem
    if shape.kind != "dict":
        return f"it holds a {shape.kind}, not Tune's dictionary"
    missing = [key for key in keys if key not in shape.keys]
    if missing:
        return f"no key {missing[0]!r}, which Tune reads back"
    if shape.depth > MAX_PICKLE_DEPTH:
        return f"nested {shape.depth:,} deep; Tune's are at most {MAX_PICKLE_DEPTH}"
    return None


def _check_trials(path: Path, experiment: str) -> None:
    """The experiment state at ``path`` (whole JSON) is of the shape Tune writes: its
    trials each an id, a status Tune knows, failures counted, a last result. Else
    ``DamagedState`` naming the field."""
    problem = _trials_problem(json.loads(path.read_bytes()))
    if problem is not None:
        raise DamagedState(
            f"the Tune experiment state {path} is not what Tune writes ({problem}): restore "
            f"it from a backup, or start a new search with `--warm-start {experiment}`, "
            "which begins from its finished trials"
        )


def _trials_problem(state: object) -> str | None:
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


def _sqlite_problem(
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


def _has_study(db: sqlite3.Connection, study: str) -> str | None:
    try:
        row = db.execute("SELECT 1 FROM studies WHERE study_name = ?", (study,)).fetchone()
    except sqlite3.OperationalError:
        return "no Optuna tables"
    return None if row is not None else f"no study named {study!r}"


def _has_mlflow_tables(db: sqlite3.Connection) -> str | None:
    names = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    missing = [t for t in _MLFLOW_TABLES if t not in names]
    return f"no MLflow table {missing[0]!r}" if missing else None


def _read_state(path: Path) -> bytes | str:
    """The bytes of a state file, or what is wrong with reading it."""
    try:
        size = path.stat().st_size
        if size == 0:
            return "empty: 0 bytes"
        if size > _MAX_STATE_BYTES:
            return f"{size:,} bytes, larger than a state file can be"
        return path.read_bytes()
    except OSError as err:
        return f"cannot be read: {err.strerror or err}"


def _json_problem(path: Path) -> str | None:
    data = _read_state(path)
    if isinstance(data, str):
        return data
    try:
        json.loads(data)
    except (ValueError, RecursionError) as err:
        if not data.rstrip().endswith((b"}", b"]")):
            return f"cut short at {len(data):,} bytes"
        return f"not valid JSON: {str(err)[:120]}"
    return None


def _pickle_problem(path: Path) -> str | None:
    """What is wrong with the pickle at ``path`` (its opcodes walked, nothing run)."""
    data = _read_state(path)
    if isinstance(data, str):
        return data
    try:
        for _ in pickletools.genops(data):
            pass
    except Exception as err:  # genops raises ValueError and others on a broken stream
        return f"not a whole pickle: {str(err)[:120] or type(err).__name__}"
    return None
