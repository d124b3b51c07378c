"""A runs directory checked before a search writes anything to it or Ray starts
(``gridsearch._inputs.prepare_runs_dir`` runs these first):

- ``check_folders``: every folder the search will write (the runs directory, its
  ``locks/``, ``searches/``, ``mlartifacts/``, the Tune experiment, the
  sqlite stores' folders, the embedded world) is a folder or can be made one: no part of
  its path is a regular file, a symbolic link loop or a dangling link, and the deepest
  existing part takes new files (``os.access``, and not on a read-only mount, where
  ``os.access`` says yes to root; nothing is written to find out); the sqlite stores'
  paths are short enough for sqlite to open
  (``SQLITE_MAX_PATH``) and the Tune experiment leaves room for its trials' folders
  under the system's limit on a path;
- ``check_state_files``: (``--resume``) every pickle of the Tune experiment (its
  ``tuner.pkl``, searcher and search generator states, the trials' state embedded in its
  ``experiment_state-*.json``, each trial's ``params.pkl`` and ``error.pkl``, every
  checkpoint's and MLflow artifact's ``torch.save`` file) holds data only
  (``gridsearch._pickles``): a runs directory received from elsewhere is never run.

Each problem is a ``SearchError`` whose message is one line naming the path.
"""

from __future__ import annotations

import errno
import os
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path

from gridsearch._layout import local_path, sqlite_file
from gridsearch._pickle_policies import STATE, TORCH
from gridsearch._pickles import json_problem, pickle_problem
from gridsearch.settings import SearchError, SearchSettings

__all__ = ["SQLITE_MAX_PATH", "TRIAL_PATH_ROOM", "check_folders", "check_state_files"]

# sqlite's unix file layer takes paths of at most 512 bytes including the "-journal" it
# appends for its journal: a database path of 505 bytes or more "cannot be opened"
SQLITE_MAX_PATH = 504
# what Tune and a trial add below the experiment's folder: a trial folder (Tune cuts
# its name near 130 characters, then a date), a checkpoint, a member, a file
TRIAL_PATH_ROOM = 320
_MAX_STATE_BYTES = 1 << 30  # larger is no state file (``gridsearch._damage`` says so)
_PICKLE_MAGIC = b"\x80"
_ZIP_MAGIC = b"PK\x03\x04"


def check_folders(settings: SearchSettings) -> None:
    """Every folder ``settings``' search writes can hold what it writes (see the module
    docstring); ``SearchError`` naming the first that cannot."""
    for path, what in _sqlite_files(settings):
        size = len(os.fsencode(path))
        if size > SQLITE_MAX_PATH:
            raise SearchError(
                f"{what} {_short(path)}: a path of {size} bytes, and sqlite opens paths of "
                f"at most {SQLITE_MAX_PATH}: choose a shorter --runs-dir"
                + (" (or --storage-path)" if "Optuna" in what else "")
            )
    experiment = local_path(settings.experiment_path)
    if experiment is not None:
        limit = _path_max(settings.layout.root)
        if len(os.fsencode(experiment)) + TRIAL_PATH_ROOM > limit:
            raise SearchError(
                f"--storage-path {_short(experiment)}: the Tune experiment's trials write "
                f"up to {TRIAL_PATH_ROOM} bytes below it, past this system's limit of "
                f"{limit} bytes on a path: choose a shorter --runs-dir or --storage-path"
            )
    for folder, what in _folders(settings):
        _check_writable(_deepest_folder(folder, what), folder, what)


def check_state_files(settings: SearchSettings) -> None:
    """(``--resume``) No pickle the search reads back runs anything (see the module
    docstring); ``SearchError`` naming the first file and what it would import or call."""
    roots = [local_path(settings.experiment_path)]
    if not settings.tracking_uri.startswith(("http://", "https://")):
        roots.append(settings.layout.mlartifacts / settings.experiment)
    for root in roots:
        if root is None or not root.is_dir():
            continue
        for path in _files(root):
            problem = _state_problem(path)
            if problem is not None:
                raise SearchError(_refusal(path, problem, settings.experiment))


def _state_problem(path: Path) -> str | None:
    """What the file at ``path`` would import or call when read back, or None (also for
    a file that is no pickle, or one too damaged to say: ``gridsearch._damage``)."""
    try:
        if path.stat().st_size > _MAX_STATE_BYTES and not path.name.endswith((".pt", ".pth")):
            return None
        with path.open("rb") as handle:
            head = handle.read(4)
        if head.startswith(_ZIP_MAGIC) and path.suffix in (".pt", ".pth"):
            return _torch_problem(path)
        if head.startswith(_PICKLE_MAGIC):
            return pickle_problem(path.read_bytes(), STATE)
        if path.name.startswith("experiment_state-") and path.suffix == ".json":
            return json_problem(path.read_bytes(), STATE)
    except OSError:
        return None  # unreadable: the damage checks name it
    return None


def _torch_problem(path: Path) -> str | None:
    """A ``torch.save`` file (a zip): its ``data.pkl``, whose tensors are persistent ids."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.endswith("/data.pkl")]
            if len(names) != 1:
                return None  # not torch's layout: torch.load(weights_only=True) refuses it
            return pickle_problem(archive.read(names[0]), TORCH)
    except (zipfile.BadZipFile, OSError, ValueError):
        return None


def _refusal(path: Path, problem: str, experiment: str) -> str:
    """The one line that refuses a state file: the file, what it would do, and how to go
    on."""
    if path.name == "error.pkl":
        how = (
            "Tune's pickled copy of a trial's error, whose error.txt beside it keeps the "
            f"text: remove it (rm '{path}') and resume"
        )
    else:
        how = (
            "a runs directory is data, and this file is code: resume only state this "
            f"package wrote, or start a new search with --warm-start {experiment} (it reads "
            "the Optuna study and the record, no pickle)"
        )
    return f"{path}: reading it back would {problem}; {how}"


def _files(root: Path) -> Iterator[Path]:
    """The regular files under ``root``, links not followed."""
    for folder, _, names in os.walk(root, followlinks=False):
        for name in sorted(names):
            path = Path(folder, name)
            if path.is_file() and not path.is_symlink():
                yield path


def _sqlite_files(settings: SearchSettings) -> list[tuple[Path, str]]:
    found = []
    for uri, what in ((settings.tracking_uri, "the MLflow store"),
                      (settings.optuna_storage, "the Optuna study")):  # fmt: skip
        if (path := sqlite_file(uri)) is not None:
            found.append((path, what))
    return found


def _folders(settings: SearchSettings) -> list[tuple[Path, str]]:
    """The folders the search writes, each with what it holds."""
    layout, name = settings.layout, settings.experiment
    folders = [
        (layout.root, "--runs-dir"),
        (layout.lock(name).parent, "the search's lock"),
        (layout.record(name).parent, "the search's record"),
    ]
    if not settings.tracking_uri.startswith(("http://", "https://")):
        folders.append((layout.mlartifacts / name, "the MLflow artifacts"))
    experiment = local_path(settings.experiment_path)
    if experiment is not None:
        folders.append((experiment, "the Tune experiment"))
    for path, what in _sqlite_files(settings):
        folders.append((path.parent, f"{what}'s folder"))
    if settings.data is None:
        folders.append((layout.world(settings.smoke_test), "the embedded world"))
    return folders


def _deepest_folder(folder: Path, what: str) -> Path:
    """The deepest existing folder of ``folder``'s path (it may not exist yet); a part of
    it that is a file, a link loop or a dangling link is a SearchError."""
    deepest = Path(folder.anchor)
    for part in (*reversed(folder.parents[:-1]), folder):
        try:
            mode = os.stat(part).st_mode
        except OSError as err:
            if err.errno == errno.ENOENT and not os.path.islink(part):
                return deepest  # the rest is made by the search
            raise SearchError(_not_a_folder(part, folder, what, err)) from None
        if not stat.S_ISDIR(mode):
            raise SearchError(
                f"{_short(part)} is a {_kind(mode)}, and {what} must be a folder at "
                f"{_short(folder)}: move it aside or choose another --runs-dir"
            )
        deepest = part
    return deepest


def _not_a_folder(part: Path, folder: Path, what: str, err: OSError) -> str:
    if err.errno == errno.ELOOP:
        problem = "a loop of symbolic links"
    elif err.errno == errno.ENOENT:
        problem = f"a symbolic link to nothing ({os.readlink(part)!r})"
    elif err.errno == errno.ENAMETOOLONG:
        problem = "a name or path too long for this system"
    else:
        problem = f"not readable ({err.strerror or err})"
    return (
        f"{_short(part)} is {problem}, and {what} must be a folder at {_short(folder)}: "
        "fix it or choose another --runs-dir"
    )


def _check_writable(deepest: Path, folder: Path, what: str) -> None:
    """``deepest`` takes new files: its permissions allow it, and it is not on a
    read-only mount (which ``os.access`` does not see for root)."""
    problem: str | None = None
    try:
        read_only = bool(os.statvfs(deepest).f_flag & os.ST_RDONLY)
    except OSError as err:
        read_only, problem = False, err.strerror or str(err)
    if read_only:
        problem = "Read-only file system"
    elif problem is None and not os.access(deepest, os.W_OK | os.X_OK):
        problem = "Permission denied"
    if problem is not None:
        where = "" if deepest == folder else f" (for {_short(folder)})"
        raise SearchError(
            f"{_short(deepest)}{where}: {what} cannot be written there ({problem}); make it "
            "writable, or use a writable copy (cp -r RUNS COPY, then --runs-dir COPY)"
        )


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "regular file"
    if stat.S_ISFIFO(mode):
        return "named pipe"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device or special file"


def _path_max(path: Path) -> int:
    """The system's limit on a path's length under ``path``'s nearest existing folder."""
    existing = next((p for p in (path, *path.parents) if p.is_dir()), Path("/"))
    try:
        return int(os.pathconf(existing, "PC_PATH_MAX"))
    except (OSError, ValueError):
        return 4096


def _short(path: Path, limit: int = 160) -> str:
    """A path in a message, its middle left out when long (the ends say which)."""
    text = str(path)
    return text if len(text) <= limit else f"{text[:60]}...{text[-80:]} ({len(text)} chars)"
