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
  is of the shape Tune writes (``_state_files.shape_problem``, ``_check_trials``): a
  dictionary with the keys Tune reads back, nested no deeper than ``MAX_PICKLE_DEPTH``,
  every trial of the experiment state with an id, a status Tune knows, a count of
  failures and a last result of their types;
- ``restore_whole_copies``: a Tune state file that is damaged is replaced by its last
  whole copy, which the search keeps in the experiment's ``.whole/`` folder while Tune
  runs (``gridsearch._whole``): the damaged one moved aside (``NAME.damaged``);
- ``repair_error_files``: a trial's ``error.pkl`` cut short (Tune writes it in place, and
  reads it back with the results) is removed; its ``error.txt`` keeps the error.

What is wrong with each file is said by ``gridsearch._state_files``. The search record is
checked where it is read (``settings``). ``check_resume_state``
runs them all, once, where a ``--resume`` begins.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from gridsearch._layout import sqlite_file
from gridsearch._state_files import (
    STATE_KEYS,
    has_mlflow_tables,
    has_study,
    json_file_problem,
    json_problem,
    pickle_file_problem,
    pickle_problem,
    read_state,
    shape_problem,
    shape_problem_of,
    sqlite_problem,
    trials_problem,
)
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
    problem = sqlite_problem(path, lambda db: has_study(db, study))
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
    problem = sqlite_problem(path, has_mlflow_tables)
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
    problem = json_file_problem(newest)
    if problem is not None:
        older = next((s for s in reversed(states[:-1]) if json_file_problem(s) is None), None)
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
    data = read_state(path)
    return data if isinstance(data, str) else state_bytes_problem(data, pattern)


def state_bytes_problem(data: bytes, pattern: str) -> str | None:
    """``state_problem`` of a state file's bytes, read once: what a caller checks this
    way is what it then copies, even while Tune rewrites the file."""
    if pattern == _STATE:
        problem = json_problem(data)
        return problem if problem is not None else trials_problem(json.loads(data))
    return pickle_problem(data) or shape_problem_of(data, STATE_KEYS[pattern])


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
    if not path.is_file() or pickle_file_problem(path) is None:
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
    problem = pickle_file_problem(path) or shape_problem(path, STATE_KEYS[pattern])
    if problem is not None:
        raise DamagedState(
            f"the Tune experiment file {path} is damaged ({problem}): restore it from a "
            f"backup, or start a new search with `--warm-start {experiment}`, which begins "
            "from its finished trials"
        )


def _check_trials(path: Path, experiment: str) -> None:
    """The experiment state at ``path`` (whole JSON) is of the shape Tune writes: its
    trials each an id, a status Tune knows, failures counted, a last result. Else
    ``DamagedState`` naming the field."""
    problem = trials_problem(json.loads(path.read_bytes()))
    if problem is not None:
        raise DamagedState(
            f"the Tune experiment state {path} is not what Tune writes ({problem}): restore "
            f"it from a backup, or start a new search with `--warm-start {experiment}`, "
            "which begins from its finished trials"
        )
