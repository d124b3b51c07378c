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

from gridsearch._lock import ExperimentLock, Holder, LockHeld, setup_lock


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
    damaged = tmp_path / "damaged.lock"
    damaged.write_text("{not json")
    with ExperimentLock(damaged, "x"):
        assert json.loads(damaged.read_text())["pid"] == os.getpid()


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
