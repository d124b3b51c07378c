"""One live driver per experiment: the lock file, taken atomically, named in the error,
released on every exit, and broken only when its holder is provably gone."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gridsearch._lock import ExperimentLock, Holder, LockHeld, LockUnreadable, setup_lock


def _held_by(path: Path, holder: Holder) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dataclasses.asdict(holder)))


def test_a_second_driver_is_refused_with_the_holder_named(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "e.lock"
    with ExperimentLock(path, "--experiment e") as first:
        with pytest.raises(LockHeld) as caught:
            ExperimentLock(path, "--experiment e").acquire()
        message = str(caught.value)
        assert message.startswith("--experiment e is being run by another driver")
        assert f"pid {os.getpid()}" in message and first.holder.host in message
        assert first.holder.since in message and str(path) in message
        assert "\n" not in message
    assert not path.exists()  # released
    with ExperimentLock(path, "--experiment e"):  # and free again
        assert path.exists()


def test_released_when_the_block_raises(tmp_path: Path) -> None:
    path = tmp_path / "e.lock"
    with pytest.raises(KeyboardInterrupt), ExperimentLock(path, "x"):
        raise KeyboardInterrupt
    assert not path.exists()


def test_only_one_of_many_racing_drivers_takes_it(tmp_path: Path) -> None:
    path = tmp_path / "e.lock"
    won, lost = [], []

    def take() -> None:
        lock = ExperimentLock(path, "x")
        try:
            lock.acquire()
            won.append(lock)
        except LockHeld:
            lost.append(lock)

    threads = [threading.Thread(target=take) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1 and len(lost) == 15


def _dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    return int(child.stdout)


def test_a_lock_whose_holder_is_provably_gone_is_broken(tmp_path: Path) -> None:
    me = Holder.me()
    stale = {
        "a dead pid": dataclasses.replace(me, pid=_dead_pid()),
        "a reused pid": dataclasses.replace(me, started="1"),  # this pid, another process
        "before a reboot": dataclasses.replace(me, boot="another-boot"),
    }
    for case, holder in stale.items():
        path = tmp_path / f"{case}.lock"
        _held_by(path, holder)
        with ExperimentLock(path, "x") as lock:
            assert json.loads(path.read_text())["pid"] == lock.holder.pid, case


def test_a_live_holder_or_one_on_another_host_is_never_broken(tmp_path: Path) -> None:
    parent = dataclasses.replace(Holder.me(), pid=os.getppid(), started="")
    elsewhere = dataclasses.replace(Holder.me(), host="another-host", pid=_dead_pid())
    for holder in (parent, elsewhere):
        path = tmp_path / f"{holder.host}.lock"
        _held_by(path, holder)
        with pytest.raises(LockHeld, match=f"host {holder.host}, pid {holder.pid}"):
            ExperimentLock(path, "x").acquire()
        assert json.loads(path.read_text())["pid"] == holder.pid  # left alone


def test_release_never_removes_another_drivers_lock(tmp_path: Path) -> None:
    path = tmp_path / "e.lock"
    lock = ExperimentLock(path, "x")
    lock.acquire()
    other = dataclasses.replace(Holder.me(), pid=os.getppid())
    _held_by(path, other)  # e.g. an operator removed ours and another driver took it
    lock.release()
    assert json.loads(path.read_text())["pid"] == os.getppid()


def test_setup_lock_excludes(tmp_path: Path) -> None:
    order: list[str] = []
    path = tmp_path / "setup.lock"

    def inner() -> None:
        with setup_lock(path):
            order.append("second")

    with setup_lock(path):
        thread = threading.Thread(target=inner)
        thread.start()
        thread.join(timeout=0.3)
        order.append("first")
    thread.join()
    assert order == ["first", "second"]


def _hostile_locks() -> dict[str, object]:
    """Lock files of every other type and shape (JSON text or a value to dump): each is
    something other than what a driver writes, the fields it names."""
    me = dataclasses.asdict(Holder.me())
    cases: dict[str, object] = {
        "not json": "{not json",
        "empty": "",
        "binary": "\udcff\x00",
        "a list": [],
        "a number": 7,
        "deeply nested": "[" * 100_000 + "]" * 100_000,
        "too large": {**me, "host": "h" * 5000},
        "a field missing": {k: v for k, v in me.items() if k != "pid"},
        "an unknown field": {**me, "owner": "x"},
        "host empty": {**me, "host": ""},
        "started not ticks": {**me, "started": "soon"},
    }
    for value in ("123", -1, 0, True, 1.5, None, 2**40, [1], {"pid": 1}):
        cases[f"pid {value!r}"] = {**me, "pid": value}
    for field in ("host", "started", "boot", "since"):
        cases[f"{field} 5"] = {**me, field: 5}
    return cases


def test_a_lock_file_of_any_other_shape_is_named_and_never_broken(tmp_path: Path) -> None:
    """Each: one line naming the lock file (and the field), the file left as it was (a
    pid of -1 once counted as a live driver forever; a string pid was a traceback)."""
    for case, content in _hostile_locks().items():
        path = tmp_path / "locks" / "e.lock"
        path.parent.mkdir(exist_ok=True)
        text = content if isinstance(content, str) else json.dumps(content)
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        for attempt in (ExperimentLock(path, "--experiment e").acquire,
                        ExperimentLock(path, "--experiment e").check_free):  # fmt: skip
            with pytest.raises(LockUnreadable) as caught:
                attempt()
            message = str(caught.value)
            assert "\n" not in message and str(path) in message, (case, message)
            assert message.startswith("--experiment e: the lock "), (case, message)
            assert len(message) < 400, (case, message)
        if case.startswith(("pid", "host", "started", "boot", "since", "a field")):
            field = case.split()[0] if not case.startswith("a field") else "pid"
            assert f"field {field!r}" in message, (case, message)
        assert path.read_bytes() == text.encode("utf-8", "surrogateescape"), case
        assert sorted(p.name for p in path.parent.iterdir()) == ["e.lock"], case


def test_a_lock_path_that_is_a_folder_or_a_link_is_named_and_left_alone(tmp_path: Path) -> None:
    folder = tmp_path / "folder.lock"
    (folder / "inside").mkdir(parents=True)
    link = tmp_path / "link.lock"
    _held_by(tmp_path / "elsewhere" / "real.lock", Holder.me())
    link.symlink_to(tmp_path / "elsewhere" / "real.lock")
    for path, what in ((folder, "it is a folder"), (link, "it is a symbolic link")):
        with pytest.raises(LockUnreadable, match=what):
            ExperimentLock(path, "x").acquire()
    assert (folder / "inside").is_dir() and link.is_symlink()  # neither renamed nor removed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "folder.lock", "link.lock"]


def test_a_search_refuses_an_unreadable_lock_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the command line: ``error:``, exit 2, nothing started or written."""
    from gridsearch.run import main

    path = tmp_path / "locks" / "e.lock"
    _held_by(path, dataclasses.replace(Holder.me(), pid="123"))  # type: ignore[arg-type]
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    code = main(["--space", "margin_sweep", "--smoke-test", "--experiment", "e",
                 "--runs-dir", str(tmp_path)])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0, err
    assert err.startswith(f"error: --experiment e: the lock {path} is not one a driver writes")
    assert "field 'pid'" in err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
