"""A runs directory that cannot hold a search (a loop of symbolic links, a link to
nothing, a path too long for sqlite, a regular file or a pipe where a folder goes, a
read-only folder) is one ``error:`` line naming the path, exit status 2, before anything
is written and before Ray starts: for a new search and for a ``--resume``, wherever in
the runs directory the problem is. Real folders, links, a named pipe and read-only
mounts; the real CLI in this process."""

from __future__ import annotations

import os
import pickle
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gridsearch._runs_checks import SQLITE_MAX_PATH
from gridsearch.run import main
from gridsearch.settings import SearchSettings, parse_args

# never reached: a search that got past the checks would fail to join it, not start a Ray
NO_RAY = ["--address", "127.0.0.1:9"]


def _search(runs: Path, world: Path) -> list[str]:
    return ["--space", "margin_sweep", "--smoke-test", "--experiment", "e", "--data",
            str(world), "--runs-dir", str(runs), "--no-dashboard", *NO_RAY]  # fmt: skip


def _resumable(runs: Path, world: Path) -> list[str]:
    """A recorded search whose Tune experiment exists (what --resume looks for first)."""
    settings = SearchSettings.from_args(parse_args(_search(runs, world)))
    settings.save_record(num_samples=2)
    experiment = Path(settings.experiment_path)
    experiment.mkdir(parents=True)
    (experiment / "tuner.pkl").write_bytes(pickle.dumps({"n": 1}))
    return ["--experiment", "e", "--resume", "--runs-dir", str(runs), *NO_RAY]


def _tree(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under ``root`` (links not followed): mode, size, mtime."""
    found = {}
    for folder, folders, files in os.walk(root, followlinks=False):
        for name in [*folders, *files]:
            info = os.lstat(Path(folder, name))
            found[str(Path(folder, name).relative_to(root))] = (
                info.st_mode, info.st_size, info.st_mtime_ns
            )  # fmt: skip
    return found


def _loop(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(path.name)  # a link to itself


def _dangling(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(path.parent / "gone")


def _file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("not a folder")


def _fifo(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


# where in the runs directory, and what is there instead of a folder (the runs directory,
# tune/ and searches/ only for a new search: a --resume needs its record and Tune
# experiment there)
BROKEN: dict[str, tuple[str, Callable[[Path], None], str]] = {
    "the runs directory a link loop": ("", _loop, "a loop of symbolic links"),
    "tune a link loop": ("tune", _loop, "a loop of symbolic links"),
    "mlartifacts/ a link to nothing": ("mlartifacts", _dangling, "a symbolic link to nothing"),
    "mlartifacts/ a regular file": ("mlartifacts", _file, "a regular file"),
    "locks a regular file": ("locks", _file, "a regular file"),
    "searches/ a named pipe": ("searches", _fifo, "a named pipe"),
}


def _fails(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(args)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), captured
    assert "Traceback" not in captured.err, captured
    # refused before Ray (the first call in a process also says the libraries load)
    assert "a local Ray" not in captured.out and "joining the Ray" not in captured.out, captured
    return lines[0]


@pytest.mark.parametrize("resume", [False, True], ids=["new", "resume"])
@pytest.mark.parametrize("case", list(BROKEN))
def test_a_runs_directory_that_cannot_hold_a_search_is_one_line(
    tmp_path: Path, tiny_world: Path, capsys: pytest.CaptureFixture[str], case: str, resume: bool
) -> None:
    where, make, said = BROKEN[case]
    if resume and where in ("", "tune", "searches"):
        pytest.skip("a --resume needs its record and Tune experiment there")
    runs = tmp_path / "runs"
    runs.mkdir()
    args = _resumable(runs, tiny_world) if resume else _search(runs, tiny_world)
    if where == "":
        runs.rmdir()
    make(runs / where if where else runs)
    before = _tree(tmp_path)
    line = _fails(args, capsys)
    assert f"{runs / where if where else runs} is {said}" in line, line
    assert _tree(tmp_path) == before  # nothing written, nothing made


@pytest.mark.parametrize("resume", [False, True], ids=["new", "resume"])
def test_a_path_too_long_for_sqlite_is_one_line(
    tmp_path: Path, tiny_world: Path, capsys: pytest.CaptureFixture[str], resume: bool
) -> None:
    runs = tmp_path.joinpath(*["d" * 150] * 4)  # about 630 characters
    runs.mkdir(parents=True)
    args = _resumable(runs, tiny_world) if resume else _search(runs, tiny_world)
    before = _tree(tmp_path)
    line = _fails(args, capsys)
    assert "the MLflow store" in line and f"at most {SQLITE_MAX_PATH}" in line, line
    assert len(line) < 400  # the path is named, its middle left out
    assert _tree(tmp_path) == before


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Callable[[Path], None]]:
    """Mounts a read-only tmpfs at a folder (root writes through chmod, not through a
    read-only mount); skipped where mounting is not allowed."""
    mounted: list[Path] = []

    def mount(folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)],
            capture_output=True,
        )
        if done.returncode != 0:
            pytest.skip("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)")
        mounted.append(folder)

    yield mount
    for folder in reversed(mounted):
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@pytest.mark.parametrize("where", ["mlartifacts", "locks", "tune"])
@pytest.mark.parametrize("resume", [False, True], ids=["new", "resume"])
def test_a_read_only_folder_the_search_writes_is_one_line(
    tmp_path: Path,
    tiny_world: Path,
    capsys: pytest.CaptureFixture[str],
    read_only: Callable[[Path], None],
    where: str,
    resume: bool,
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    args = _resumable(runs, tiny_world) if resume and where != "tune" else _search(runs, tiny_world)
    read_only(runs / where)
    before = _tree(tmp_path)
    line = _fails(args, capsys)
    assert line.startswith(f"error: {runs / where}") and "Read-only file system" in line, line
    assert _tree(tmp_path) == before
