"""A runs directory moved since its search started is made to name where it is now; a
relocation killed at any point and done again gives exactly what one done whole gives:
also when the new place is inside the old one (a path rebased twice would name
``.../inner/inner/...``), when the old one is inside the new one and named like one of
its folders, and when the directory moves again before the relocation is done again.

Each cut is real: the relocation runs in a forked process that dies (``os._exit``, as
a kill leaves it) right before its k-th rename, for every k; then this process does it
again. Real pickles, JSON and sqlite databases, in the runs directory's layout."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gridsearch._relocate import journal_path, relocate
from gridsearch.settings import SearchError, SearchSettings

EXPERIMENT = "e"


def _search(old: Path) -> None:
    """A search's record and state files at ``old``, each naming paths under it."""
    settings = SearchSettings.from_argv(
        ["--space", "margin_sweep", "--runs-dir", str(old), "--experiment", EXPERIMENT]
    )
    settings.save_record(num_samples=2)
    tune = old / "tune" / EXPERIMENT
    tune.mkdir(parents=True)
    named = {
        "storage": settings.optuna_storage,
        "folder": str(tune),
        "uri": (old / "mlartifacts").as_uri(),
        "elsewhere": "/elsewhere/runs",
    }
    (tune / "tuner.pkl").write_bytes(pickle.dumps(named, protocol=5))
    (tune / "searcher-state-2026.pkl").write_bytes(pickle.dumps([named] * 3, protocol=4))
    (tune / "experiment_state-2026.json").write_text(json.dumps({"trial_data": named}))
    for database in (old / "mlflow.db", tune.parent / f"{EXPERIMENT}.optuna.db"):
        with sqlite3.connect(database) as connection:
            connection.execute("CREATE TABLE runs (id INTEGER, location TEXT, n REAL)")
            connection.executemany(
                "INSERT INTO runs VALUES (?, ?, ?)",
                [
                    (1, (old / "mlartifacts" / "1").as_uri(), 0.5),
                    (2, str(tune), 1.0),
                    (3, "/elsewhere/runs", 2.0),
                ],
            )
        connection.close()


def _snapshot(root: Path) -> dict[str, Any]:
    """Every file under ``root``: its bytes, a database's rows."""
    found: dict[str, Any] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            key = str(path.relative_to(root))
            if path.suffix == ".db":
                with sqlite3.connect(path) as connection:
                    found[key] = list(connection.iterdump())
                connection.close()
            else:
                found[key] = path.read_bytes()
    return found


def _restore(root: Path, files: dict[str, bytes]) -> None:
    shutil.rmtree(root, ignore_errors=True)
    for key, data in files.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)


def _raw(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _settings(root: Path) -> SearchSettings:
    return SearchSettings.from_argv(
        ["--resume", "--experiment", EXPERIMENT, "--runs-dir", str(root)]
    )


def _relocate_dying_before(root: Path, rename: int) -> int:
    """Relocate ``root`` in a forked process that dies right before its ``rename``-th
    rename (none: 0); the number of renames it made."""
    settings = _settings(root)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: relocate, and die where told
        os.close(read)
        done = 0

        def cut(event: str, args: tuple[Any, ...]) -> None:
            nonlocal done
            if event == "os.rename":
                if done + 1 == rename:
                    os.write(write, str(done).encode())
                    os._exit(3)
                done += 1

        sys.addaudithook(cut)
        try:
            relocate(settings)
            os.write(write, str(done).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as answer:
        return int(answer.read() or -1)


def _inward(tmp_path: Path) -> tuple[Path, Path]:
    old = tmp_path / "runs"
    _search(old)
    old.rename(tmp_path / "staged")
    old.mkdir()
    return old, (tmp_path / "staged").rename(old / "inner")


def _outward(tmp_path: Path) -> tuple[Path, Path]:
    """The runs directory was ``top/tune`` and is now ``top``: its tune/ folder is named
    like the old place."""
    old = tmp_path / "top" / "tune"
    _search(old)
    old.rename(tmp_path / "staged")
    old.parent.rmdir()
    return old, (tmp_path / "staged").rename(tmp_path / "top")


MOVES: dict[str, Callable[[Path], tuple[Path, Path]]] = {"inward": _inward, "outward": _outward}


@pytest.mark.parametrize("move", list(MOVES))
def test_a_relocation_cut_anywhere_and_redone_is_the_relocation_done_whole(
    tmp_path: Path, move: str
) -> None:
    _, new = MOVES[move](tmp_path)
    moved = _raw(new)
    total = _relocate_dying_before(new, 0)  # done whole
    assert total > 10  # the files, the journal's steps, the record
    whole = _snapshot(new)
    assert not journal_path(_settings(new)).exists()
    text = b"".join(v if isinstance(v, bytes) else "".join(v).encode() for v in whole.values())
    assert str(new / "tune" / EXPERIMENT).encode() in text
    assert b"/inner/inner" not in text and b"/tune/tune/" not in text and b"/top/e" not in text
    assert b"/elsewhere/runs" in text  # a path outside the runs directory stays
    for rename in range(1, total + 1):
        _restore(new, moved)
        assert _relocate_dying_before(new, rename) == rename - 1  # cut there
        relocate(_settings(new))  # done again
        assert _snapshot(new) == whole, f"cut before rename {rename} of {total}"
    assert not list(new.rglob("*.relocating"))


def test_a_relocation_cut_then_moved_again_names_the_last_place(tmp_path: Path) -> None:
    """Cut short in one place, the runs directory moves on and is resumed there: what the
    cut relocation replaced is rebased from where it went, the rest from the start."""
    _, new = _inward(tmp_path)
    moved = _raw(new)
    total = _relocate_dying_before(new, 0)
    third = tmp_path / "third"
    _restore(new, moved)
    new.rename(third)
    relocate(_settings(third))
    whole = _snapshot(third)  # relocated straight from the start to the last place
    for rename in range(1, total + 1):
        shutil.rmtree(third)
        _restore(new, moved)
        _relocate_dying_before(new, rename)
        new.rename(third)
        relocate(_settings(third))
        assert _snapshot(third) == whole, f"cut before rename {rename} of {total}"


def test_a_journal_of_any_other_shape_is_named_and_nothing_is_rewritten(tmp_path: Path) -> None:
    """The journal of a relocation cut short, each field of every hostile type: one line
    naming the journal and the field, before any file is touched (a relocation done
    again without its journal could rebase a file twice)."""
    old = tmp_path / "runs"
    _search(old)
    new = old.rename(tmp_path / "moved")
    settings = _settings(new)
    journal = journal_path(settings)
    whole = {"from": str(old), "to": str(new), "files": {"tune/e/tuner.pkl": "0" * 64}}
    hostile: list[tuple[object, str]] = [
        ("not json", "not a JSON journal"),
        ([1], "a JSON list"),
        ({**whole, "extra": 1}, "field 'extra'"),
        ({**whole, "files": {"../x": "0" * 64}}, "is not a path inside it"),
        ({**whole, "files": {"/abs": "0" * 64}}, "is not a path inside it"),
        ({**whole, "files": {"x": "zz"}}, "has no sha256 digest"),
    ]
    for field in ("from", "to", "files"):
        for value in (None, 1, True, [], "relative/path", {"a": 1}):
            if field == "files" and isinstance(value, dict):
                continue  # a dict of files: its entries are checked above
            hostile.append(({**whole, field: value}, f"field {field!r}"))
    before = _raw(new)
    for content, said in hostile:
        journal.write_text(content if isinstance(content, str) else json.dumps(content))
        with pytest.raises(SearchError) as caught:
            relocate(settings)
        message = str(caught.value)
        assert message.startswith(f"{journal} is not a relocation journal"), message
        assert said in message and "\n" not in message, (content, message)
        assert _raw(new) == {**before, str(journal.relative_to(new)): journal.read_bytes()}
    journal.write_text(json.dumps(whole))  # whole: taken (a digest of no file: from the start)
    relocate(settings)
    assert not journal.exists()
