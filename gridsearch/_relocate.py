"""A runs directory copied or moved since its search started, made to name where it is
now (``relocate``; the settings' paths are rebased from the record, ``_resumed``).

What names the old place besides the record: Tune's state files at the top of the
experiment (the pickled tuner and searcher state hold the Optuna study's database URL,
which unpickling opens; the experiment state names the trials' folders) and the sqlite
databases under the runs directory (MLflow's artifact locations, kept absolute). Pickles
are rewritten opcode by opcode, never unpickled; a database is rewritten in a copy that
replaces it whole. Every file is replaced atomically, and the record last.

A relocation cut short and done again gives what one done whole gives, also when the new
place is inside the old one (a path rebased twice would name ``.../inner/inner/...``):
before a file is replaced, the journal (``searches/NAME.relocation``) records where
the relocation goes and the hash of the file it writes; done again, a file whose hash is
the recorded one is rebased already (from the journal's target, should the directory
have moved again meanwhile), any other from the record's place. The journal goes once
the record names the new place. The files are checked (damage, and that they hold no
code) before any of this: ``gridsearch._inputs.prepare_runs_dir``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickletools
import sqlite3
import struct
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gridsearch._damage import WHOLE_COPIES
from gridsearch._layout import local_path, rebase, sqlite_file
from gridsearch.settings import SearchError, SearchSettings
from gridsearch.tracking import forget_database
from storage import is_temp_name, write_text_atomic
from storage.cli import error_line

__all__ = ["journal_path", "rebase_pickle", "relocate"]


def journal_path(settings: SearchSettings) -> Path:
    """Where a relocation of ``settings``' runs directory records its progress."""
    record = settings.layout.record(settings.experiment)
    return record.with_name(f"{settings.experiment}.relocation")  # not *.json: no search


def relocate(settings: SearchSettings) -> str:
    """Make a runs directory copied or moved from ``settings.moved_from`` name itself (see
    the module docstring); returns the line that says so."""
    old, new = settings.moved_from, settings.layout.root
    assert old is not None
    journal = _Journal(journal_path(settings), old, new)
    for written in (journal.path, settings.layout.record(settings.experiment)):
        _remove_temporaries(written)
    for path in _state_files(settings):
        journal.rebase(path, _rebased_file)
    for database in _databases(settings):
        journal.rebase(database, _rebased_database)
        forget_database(database)  # this process's connections to the file it replaced
    settings.save_record()
    journal.path.unlink(missing_ok=True)
    return (
        f"resuming in {new}: the search started in {old}; what it recorded there now names "
        "the same files here"
    )


def _state_files(settings: SearchSettings) -> list[Path]:
    new = settings.layout.root
    experiment = local_path(settings.experiment_path)
    if experiment is None or not experiment.is_relative_to(new) or not experiment.is_dir():
        return []
    _remove_leftovers(experiment)
    copies = experiment / WHOLE_COPIES  # the state files' last whole copies (_whole)
    folders = [experiment, copies] if copies.is_dir() else [experiment]
    return [path for folder in folders for path in sorted(folder.iterdir()) if path.is_file()]


def _databases(settings: SearchSettings) -> list[Path]:
    found = []
    for location in (settings.tracking_uri, settings.optuna_storage):
        database = sqlite_file(location)
        if (
            database is not None
            and database.is_relative_to(settings.layout.root)
            and database.is_file()
            and database not in found
        ):
            _remove_leftovers(database.parent)
            found.append(database)
    return found


def _remove_leftovers(folder: Path) -> None:
    """The copies a relocation killed mid-write left in ``folder`` (and sqlite's journal
    of one): never the state itself."""
    for path in folder.glob(f".*{_COPY}*"):
        path.unlink(missing_ok=True)


def _remove_temporaries(path: Path) -> None:
    """What an atomic write of ``path`` killed before its rename left beside it
    (``storage.write_text_atomic``: ``.NAME.<hex>.tmp``)."""
    for found in path.parent.glob(f".{path.name}.*.tmp"):
        if is_temp_name(found.name):
            found.unlink(missing_ok=True)


_COPY = ".relocating"  # the suffix of a rebased copy before it replaces its file


class _Journal:
    """What a relocation from ``old`` to ``new`` has replaced so far (see the module
    docstring), kept at ``path``."""

    def __init__(self, path: Path, old: Path, new: Path) -> None:
        self.path, self.old, self.new = path, old, new
        self.done: dict[str, str] = {}  # file (relative to new) -> sha256 written
        self.previous: tuple[Path, dict[str, str]] | None = None  # a cut-short one
        recorded = _read_journal(path)
        if recorded is not None and recorded["from"] == str(old):
            self.previous = (Path(recorded["to"]), dict(recorded["files"]))

    def rebase(self, path: Path, rebased: Any) -> None:
        """Replace ``path`` by ``rebased(path, source, new, out)``'s file, rebased from
        where its paths point now (``source``); nothing when they point here already."""
        key = str(path.relative_to(self.new))
        source = self.old
        if self.previous is not None and self.previous[1].get(key) == _sha256(path):
            source = self.previous[0]  # replaced by the relocation cut short
        if source == self.new:
            self.done[key] = self.previous[1][key] if self.previous else _sha256(path)
            self._save()
            return
        out = path.with_name(f".{path.name}.{uuid.uuid4().hex}{_COPY}")
        try:
            if not rebased(path, source, self.new, out):
                return  # nothing in it names the old place
            self.done[key] = _sha256(out)
            self._save()  # before the file is replaced: a cut here is told apart by hash
            os.replace(out, path)
        finally:
            out.unlink(missing_ok=True)

    def _save(self) -> None:
        files = dict(self.previous[1]) if self.previous else {}
        files.update(self.done)
        record = {"from": str(self.old), "to": str(self.new), "files": files}
        write_text_atomic(self.path, json.dumps(record, indent=2) + "\n")


def _rebased_file(path: Path, old: Path, new: Path, out: Path) -> bool:
    """Write to ``out`` the Tune state file ``path`` (a pickle, or text) with its paths
    under ``old`` under ``new``; False (nothing written) when it names none."""
    data = path.read_bytes()
    if str(old).encode() not in data and quote(str(old)).encode() not in data:
        return False
    if data[:1] == b"\x80":  # a pickle (protocol 2 or later)
        moved = rebase_pickle(data, old, new)
    else:
        moved = rebase(data.decode("utf-8"), old, new).encode("utf-8")
    with out.open("wb") as handle:  # replaces its file only once whole (Journal.rebase)
        handle.write(moved)
        handle.flush()
        os.fsync(handle.fileno())
    return True


_STRINGS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"}


def rebase_pickle(data: bytes, old: Path, new: Path) -> bytes:
    """``data`` (a pickle) with every string naming a path under ``old`` naming it under
    ``new`` (``_layout.rebase``), rewritten opcode by opcode without unpickling it (which
    would run code, and open the databases it names). Frames are dropped: optional."""
    ops = list(pickletools.genops(data))
    out = io.BytesIO()
    for index, (opcode, arg, start) in enumerate(ops):
        end = ops[index + 1][2] if index + 1 < len(ops) else len(data)
        if opcode.name == "FRAME":
            continue
        if opcode.name in _STRINGS and isinstance(arg, str):
            moved = rebase(arg, old, new)
            if moved != arg:
                out.write(_string_op(moved))
                continue
        out.write(data[start:end])
    return out.getvalue()


def _string_op(text: str) -> bytes:
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) < 256:
        return b"\x8c" + bytes([len(encoded)]) + encoded  # SHORT_BINUNICODE
    return b"X" + struct.pack("<I", len(encoded)) + encoded  # BINUNICODE


def _rebased_database(path: Path, old: Path, new: Path, out: Path) -> bool:
    """Write to ``out`` a copy of the sqlite database at ``path`` (sqlite's own backup:
    a consistent copy, a hot journal rolled back) with every text value under ``old``
    (MLflow's artifact locations and model sources, the search's recorded paths) under
    ``new``. Always True."""
    source = sqlite3.connect(path)
    copy = sqlite3.connect(out)
    try:
        source.backup(copy)
        _rebase_rows(copy, old, new)
    finally:
        copy.close()
        source.close()
    return True


def _rebase_rows(connection: sqlite3.Connection, old: Path, new: Path) -> None:
    connection.create_function(
        "rebased", 1, lambda value: rebase(value, old, new), deterministic=True
    )
    needles = {str(old), quote(str(old))}
    with connection:
        tables = [
            name
            for (name,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        for table in tables:
            columns = [row[1] for row in connection.execute(f'PRAGMA table_info("{table}")')]
            for column in columns:
                for needle in needles:
                    connection.execute(
                        f'UPDATE "{table}" SET "{column}" = rebased("{column}") WHERE '
                        f'typeof("{column}") = \'text\' AND instr("{column}", ?) > 0',
                        (needle,),
                    )


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


_MAX_JOURNAL_BYTES = 16 << 20  # a line per state file: kilobytes


def _read_journal(path: Path) -> dict[str, Any] | None:
    """The journal a relocation cut short left, None where there is none; a file that is
    not what ``_Journal`` writes (a JSON object: ``from`` and ``to``, absolute paths;
    ``files``, relative paths to sha256 digests) is a ``SearchError`` naming the field:
    a relocation done again without it could rebase a file twice."""
    try:
        if not path.exists():
            return None
        if not path.is_file() or path.stat().st_size > _MAX_JOURNAL_BYTES:
            raise ValueError("not a small regular file")
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise _bad_journal(path, f"not a JSON journal: {error_line(err, 120)}") from None
    if not isinstance(recorded, dict):
        raise _bad_journal(path, f"a JSON {type(recorded).__name__}, expected an object")
    for key in ("from", "to"):
        value = recorded.get(key)
        if not (isinstance(value, str) and os.path.isabs(value)):
            raise _bad_journal(path, f"field {key!r}: expected an absolute path")
    files = recorded.get("files")
    if not isinstance(files, dict):
        raise _bad_journal(path, "field 'files': expected an object of files and digests")
    for name, digest in files.items():
        if os.path.isabs(name) or ".." in Path(name).parts:
            raise _bad_journal(path, f"field 'files': {name[:60]!r} is not a path inside it")
        if not (isinstance(digest, str) and len(digest) == 64 and _is_hex(digest)):
            raise _bad_journal(path, f"field 'files': {name[:60]!r} has no sha256 digest")
    unknown = sorted(set(recorded) - {"from", "to", "files"})
    if unknown:
        raise _bad_journal(path, f"field {unknown[0][:40]!r}: not a field of a journal")
    return recorded


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def _bad_journal(path: Path, what: str) -> SearchError:
    return SearchError(
        f"{path} is not a relocation journal this package writes ({what}); it records a "
        "move of the runs directory cut short: resume the copy made before that move, or "
        f"remove it (rm '{path}') to take the move in again from the record's place"
    )
