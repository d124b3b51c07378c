"""`analysis.report` and `analysis.compare` pointed at a tracking store that is not one:
one `error:` line naming the file (exit 2), and the file left exactly as it was (MLflow
would write its schema into an empty or foreign sqlite file)."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from analysis import compare, report


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _text(path: Path) -> None:
    path.write_text("runs of the margin search\n")


def _random(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 20)


def _directory(path: Path) -> None:
    path.mkdir()


def _optuna_like(path: Path) -> None:
    """An SQLite database, but not MLflow's (an Optuna study given by mistake)."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE studies (study_id INTEGER PRIMARY KEY, study_name TEXT)")
    db.close()


def _truncated_sqlite(path: Path) -> None:
    """The first page of an SQLite file only: the header says SQLite, the rest is gone."""
    _optuna_like(path)
    path.write_bytes(path.read_bytes()[:100])


BAD_FILES: dict[str, tuple[Callable[[Path], None], str]] = {
    "empty": (_empty, "is an empty file (0 bytes), not an MLflow tracking store"),
    "text": (_text, "is not an SQLite database, so not an MLflow tracking store"),
    "random bytes": (_random, "is not an SQLite database"),
    "a directory": (_directory, "is a directory, expected the MLflow tracking store's file"),
    "another sqlite database": (_optuna_like, "without the tables of an MLflow tracking store"),
    "a truncated sqlite file": (_truncated_sqlite, "is damaged or locked"),
}


def _state(folder: Path) -> dict[str, tuple[bytes, int] | None]:
    """Every path under ``folder``: a file's bytes and mtime, None for a directory."""
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) if p.is_file() else None
        for p in sorted(folder.rglob("*"))
    }


def _report(runs: Path, *extra: str) -> list[str]:
    return ["--experiment", "e", "--runs-dir", str(runs), "--no-log", *extra]


def _compare(runs: Path, *extra: str) -> list[str]:
    return ["a", "b", "--runs-dir", str(runs), *extra]


CLIS = {"report": (report.main, _report), "compare": (compare.main, _compare)}


def _error_line(capsys: pytest.CaptureFixture[str], code: int) -> str:
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert code == 2 and out == "", (code, out)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.mark.parametrize("cli", sorted(CLIS))
@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_file_that_is_no_tracking_store_is_named_and_left_alone(
    tmp_path: Path, capsys, cli: str, case: str
) -> None:
    make, message = BAD_FILES[case]
    db = tmp_path / "mlflow.db"
    make(db)
    before = _state(tmp_path)
    main, argv = CLIS[cli]
    line = _error_line(capsys, main(argv(tmp_path)))
    assert line.startswith(f"error: tracking store sqlite:///{db}: {db} "), line
    assert message in line
    assert _state(tmp_path) == before  # same bytes, same mtime, no journal or report


@pytest.mark.parametrize("cli", sorted(CLIS))
def test_an_unreadable_tracking_store(tmp_path: Path, capsys, cli: str) -> None:
    db = tmp_path / "mlflow.db"
    _optuna_like(db)
    db.chmod(0o000)
    try:
        try:
            db.read_bytes()
        except PermissionError:
            pass
        else:
            pytest.skip("this process reads a file of mode 000 (root): nothing to test")
        main, argv = CLIS[cli]
        line = _error_line(capsys, main(argv(tmp_path)))
        assert line == (
            f"error: tracking store sqlite:///{db}: {db} cannot be read (Permission denied)"
        )
    finally:
        db.chmod(0o644)


@pytest.mark.parametrize("cli", sorted(CLIS))
@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("bogus://x", "tracking store bogus://x: unknown URI scheme 'bogus'"),
        ("sqlite:///{tmp}/no/such/dir/mlflow.db", "/no/such/dir/mlflow.db does not exist"),
        ("file://{tmp}/no-such-folder", "no-such-folder: no such folder"),
        ("{tmp}/no-such-folder", "no-such-folder: no such folder"),
        ("", "--tracking-uri: got an empty string, expected a tracking URI"),
    ],
)
def test_a_tracking_uri_that_cannot_be_used(
    tmp_path: Path, capsys, cli: str, uri: str, message: str
) -> None:
    main, argv = CLIS[cli]
    uri = uri.format(tmp=tmp_path)
    line = _error_line(capsys, main(argv(tmp_path, "--tracking-uri", uri)))
    assert message in line, line
    assert list(tmp_path.iterdir()) == []  # MLflow created nothing


def test_an_optuna_storage_that_is_not_a_study_is_an_error(tmp_path: Path, capsys) -> None:
    """Checked before MLflow is read (Optuna would create a missing study file)."""
    cases = {
        tmp_path / "missing.db": "does not exist",
        tmp_path / "mlflow.db": "is an empty file (0 bytes), not an Optuna study",
    }
    _empty(tmp_path / "mlflow.db")
    for path, message in cases.items():
        option = f"sqlite:///{path}"
        line = _error_line(capsys, report.main(_report(tmp_path, "--optuna-storage", option)))
        assert line.startswith(f"error: --optuna-storage {option}: {path} {message}"), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]
    assert (tmp_path / "mlflow.db").read_bytes() == b""


def test_an_unknown_option_or_a_missing_one_is_one_line(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as stopped:
        report.main([*_report(tmp_path), "--bogus"])
    assert _error_line(capsys, int(stopped.value.code or 0)).endswith(
        "(see python -m analysis.report --help)"
    )
    # without --experiment: the latest search of --runs-dir, and this one holds none
    line = _error_line(capsys, report.main(["--runs-dir", str(tmp_path)]))
    assert line.startswith(f"error: --runs-dir {tmp_path}: holds no search")


def test_a_runs_dir_that_does_not_exist_is_not_created(tmp_path: Path, capsys) -> None:
    """The default store of a --runs-dir that does not exist: named, nothing created."""
    runs = tmp_path / "no-runs"
    line = _error_line(capsys, report.main(_report(runs)))
    assert line.startswith(f"error: tracking store sqlite:///{runs / 'mlflow.db'}: ")
    assert not runs.exists() and os.listdir(tmp_path) == []
