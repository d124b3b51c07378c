"""A disk that fills during a search, for real: a small tmpfs (mounted here, skipped where
that is not allowed) filled to its last byte while a trial trains, the free-space guard
set to 0 so that nothing warns before a write meets ENOSPC. The search ends with one
``error:`` line and exit 2, nothing RUNNING in MLflow, the trial hit left to ``--resume``,
which finishes that very trial from its checkpoint once space is freed. Around it: the
MLflow write queue on a full disk (a real sqlite store), the guard's reserve of space,
and Ray's log lines about a full disk."""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient

from gridsearch._damage import TUNE_STATE_FILES, WHOLE_COPIES
from gridsearch._interrupt import DiskGuard, Interruption, Reserve, quiet_disk_full_logs
from gridsearch._whole import WholeCopies
from gridsearch.run import main
from gridsearch.tracking import OUTCOME_TAG, ROLE_TAG, TRIAL_TAG
from gridsearch.tracking._write_queue import WriteQueue
from tests.gridsearch.test_drivers import SEARCH, Driver


def _mount(where: Path, megabytes: int) -> bool:
    where.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(where)],
        capture_output=True,
    )
    return result.returncode == 0


def _small_disk(tmp_path: Path, megabytes: int) -> Iterator[Path]:
    disk = tmp_path / "disk"
    if not _mount(disk, megabytes):
        pytest.skip("cannot mount a small tmpfs here (needs root and CAP_SYS_ADMIN)")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


@pytest.fixture
def disk64(tmp_path: Path) -> Iterator[Path]:
    yield from _small_disk(tmp_path, 64)


@pytest.fixture
def disk8(tmp_path: Path) -> Iterator[Path]:
    yield from _small_disk(tmp_path, 8)


def _fill(disk: Path) -> Path:
    """Another process's file that takes every byte left on ``disk``. The search running
    beside it may free a few blocks meanwhile (a temporary file replaced, an old
    checkpoint removed), so it fills again until none is left."""
    ballast = disk / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for _ in range(20):
            for chunk in (2**20, 4096, 1):
                try:
                    while True:
                        os.write(fd, bytes(chunk))
                except OSError as err:
                    assert err.errno == errno.ENOSPC
            if os.statvfs(disk).f_bavail == 0:
                break
    finally:
        os.close(fd)
    assert os.statvfs(disk).f_bavail == 0
    return ballast


def _runs(runs: Path, experiment: str) -> tuple[list, list]:
    """The parent run(s) and the trials' runs of ``experiment``."""
    client = MlflowClient(f"sqlite:///{runs / 'mlflow.db'}")
    found = client.get_experiment_by_name(experiment)
    assert found is not None
    every = client.search_runs([found.experiment_id])
    trials = [r for r in every if r.data.tags.get(ROLE_TAG) == "trial"]
    return [r for r in every if r not in trials], trials


@pytest.mark.slow
def test_a_disk_that_fills_during_a_trial_is_resumed_not_failed(
    disk64: Path, capsys: pytest.CaptureFixture[str], on_cluster: list[str]
) -> None:
    runs = disk64 / "runs"
    # one trial: the disk fills in its middle (a trial not started yet would only be
    # started by the resume, as after any interruption: test_interrupted.py)
    args = [*SEARCH, "--num-samples", "1", "--runs-dir", str(runs), "--experiment", "full",
            *on_cluster]  # fmt: skip
    driver = Driver(*args, "--min-free-disk", "0")  # no guard: a write meets ENOSPC
    driver.wait_for("epoch 1/2")  # the trial has a checkpoint; its next write fails
    ballast = _fill(disk64)
    code, out = driver.finish(timeout_s=300)

    assert code == 2, out
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, out
    assert errors[0].startswith(f"error: no space left on {runs}: a trial's write failed")
    assert "No space left on device" in errors[0] and "--resume" in errors[0]
    assert "Traceback" not in out and "EOFError" not in out and "Unhandled error" not in out, out
    parents, trials = _runs(runs, "full")
    assert [(p.info.status, p.data.tags[OUTCOME_TAG]) for p in parents] == [
        ("KILLED", "interrupted")
    ]
    assert trials and all(t.info.status == "KILLED" for t in trials)  # none left RUNNING
    assert {t.data.tags[OUTCOME_TAG] for t in trials} == {"search_ended"}  # not failed
    hit = {t.data.tags[TRIAL_TAG] for t in trials}

    # the last whole copy of each state file is kept: here the reserve gave Tune's last
    # save its room, which a disk under twice the reserve has not: that save cut short
    # (as there) leaves the resume the copy, not only --warm-start
    experiment = runs / "tune" / "full"
    for pattern in TUNE_STATE_FILES:
        (copy,) = (experiment / WHOLE_COPIES).glob(pattern)
        assert (experiment / copy.name).read_bytes() == copy.read_bytes(), pattern
    (state,) = experiment.glob("experiment_state-*.json")
    state.write_bytes(state.read_bytes()[:4096])

    ballast.unlink()  # space freed: the same search goes on
    resume = ["--experiment", "full", "--resume", "--runs-dir", str(runs), *on_cluster]
    assert main(resume) == 0
    captured = capsys.readouterr()
    assert f"{state} was damaged (cut short at 4,096 bytes): moved aside" in captured.out
    assert "1 trial: 1 finished" in captured.out and "finished in" in captured.out
    assert "stopped (" not in captured.out and not captured.err.strip()
    for trial in hit:  # restored from its checkpoint: its first epochs are not trained again
        assert f"{trial}  epoch 2/2" in captured.out
        assert f"{trial}  epoch 0/2" not in captured.out
    parents, trials = _runs(runs, "full")
    assert [p.info.status for p in parents] == ["FINISHED"]
    assert len(trials) == 1 and hit == {t.data.tags[TRIAL_TAG] for t in trials}
    assert {t.data.tags[OUTCOME_TAG] for t in trials} == {"finished"}
    study = optuna.load_study(
        study_name="full", storage=f"sqlite:///{runs / 'tune/full.optuna.db'}"
    )
    assert [t.state.name for t in study.trials] == ["COMPLETE"]  # the trial not given up
    assert not list(runs.glob(".disk-reserve-*"))  # the reserve given back


def test_a_state_file_keeps_its_last_whole_copy_on_a_full_disk(disk8: Path) -> None:
    """On a disk too small for the reserve (8 MiB), filled: a state file Tune saves anew
    and a full disk cuts short is not copied (the last whole copy stays); nor is a whole
    one the full disk leaves no room to copy. Once there is room, the new one is."""
    folder = disk8 / "tune" / "e"
    folder.mkdir(parents=True)
    state = folder / "experiment_state-2026-01-01_00-00-00.json"
    whole = {"trial_data": [], "runner_data": {}, "stats": {"start_time": 1.0}}
    state.write_text(json.dumps(whole))
    copies = WholeCopies(folder)
    assert copies.copy() == [folder / WHOLE_COPIES / state.name]
    ballast = _fill(disk8)
    grown = json.dumps({**whole, "runner_data": {"x": "y" * 65536}})
    # Tune's save in place (its first page fits where the old file was): cut short
    with pytest.raises(OSError), state.open("w") as handle:
        handle.write(grown)
        handle.flush()
        os.fsync(handle.fileno())
    assert copies.copy() == []  # not whole: not copied
    assert json.loads((folder / WHOLE_COPIES / state.name).read_text()) == whole
    # whole again, in the page its old self freed: the disk still has no room for a copy
    state.write_text(json.dumps({**whole, "stats": {"start_time": 2.0}}))
    assert copies.copy() == [] and not list((folder / WHOLE_COPIES).glob(".*.tmp"))
    assert json.loads((folder / WHOLE_COPIES / state.name).read_text()) == whole
    ballast.unlink()
    assert copies.copy() == [folder / WHOLE_COPIES / state.name]
    assert json.loads((folder / WHOLE_COPIES / state.name).read_text())["stats"]["start_time"] == 2


def test_the_write_queue_does_not_wait_for_a_full_disk(disk8: Path) -> None:
    client = MlflowClient(f"sqlite:///{disk8 / 'mlflow.db'}")
    run = client.create_run(client.create_experiment("q")).info.run_id
    queue = WriteQueue(lambda: True, "the store", retry_every_s=5.0)
    ballast = _fill(disk8)
    queue.submit("a metric", lambda: client.log_metric(run, "m", 1.0))
    assert queue.pending == 1 and queue.disk_full is not None
    assert "database or disk is full" in queue.disk_full
    started = time.monotonic()
    assert not queue.flush(wait_s=300)  # tried once more, not waited for
    assert time.monotonic() - started < 2
    assert queue.why_pending(300).startswith("no space left for the MLflow tracking store")
    assert queue.pending == 1  # kept: a full disk frees up
    ballast.unlink()
    assert queue.flush(wait_s=300) and queue.disk_full is None
    assert client.get_run(run).data.metrics == {"m": 1.0}


def test_a_store_that_does_not_answer_is_still_waited_for() -> None:
    def away() -> None:
        raise ConnectionError("connection refused")

    queue = WriteQueue(lambda: False, "http://mlflow:5000", retry_every_s=0.05)
    queue.submit("a metric", away)
    started = time.monotonic()
    assert not queue.flush(wait_s=0.3)
    assert time.monotonic() - started >= 0.25 and queue.disk_full is None
    assert queue.why_pending(0.3) == (
        "the MLflow tracking store at http://mlflow:5000 did not come back within 0.3 s"
    )


def test_the_reserve_is_taken_once_per_device_and_given_back(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    stale = a / ".disk-reserve-999999999"  # left by a process that no longer runs
    stale.write_bytes(b"x")
    reserve = Reserve([a, b, tmp_path / "not-yet"], 2**20)
    reserve.take()
    assert reserve.files == [a / f".disk-reserve-{os.getpid()}"]  # one device: one file
    assert reserve.files[0].stat().st_size == 2**20 and not stale.exists()
    assert reserve.give_back() == 2**20 and not list(a.iterdir())
    assert reserve.give_back() == 0


def test_no_reserve_where_it_would_take_the_last_space(disk8: Path) -> None:
    reserve = Reserve([disk8], 5 * 2**20)  # 8 MB: less than twice the reserve is free
    reserve.take()
    assert reserve.files == [] and not list(disk8.iterdir())
    Reserve([disk8], 0).take()
    assert not list(disk8.iterdir())


@pytest.fixture
def stop_signals() -> Iterator[list[int]]:
    """SIGUSR1 (Tune's graceful stop, which ``Interruption.request`` sends) recorded
    instead of stopping anything, as if Tune were running."""
    received: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: received.append(signum))
    try:
        yield received
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_the_guard_gives_its_reserve_back_when_it_stops_for_the_disk(
    tmp_path: Path, stop_signals: list[int]
) -> None:
    interruption = Interruption()
    guard = DiskGuard([tmp_path], 2**62, interruption, every_s=0, reserve_bytes=2**20)
    guard.setup()
    assert len(guard.reserve.files) == 1
    guard.on_step_begin(0, [])
    assert stop_signals == [signal.SIGUSR1]
    assert interruption.reason is not None
    assert interruption.reason.startswith(f"no space left on {tmp_path}: ")
    assert guard.reserve.files == [] and not list(tmp_path.glob(".disk-reserve-*"))
    guard.on_experiment_end([])  # nothing left to give back
    assert stop_signals == [signal.SIGUSR1]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def ray_logs() -> Iterator[_Records]:
    records = _Records()
    names = ("ray.tune.execution.tune_controller", "ray.tune.execution.experiment_state")
    for name in names:
        logging.getLogger(name).addHandler(records)
    quiet_disk_full_logs()
    try:
        yield records
    finally:
        for name in names:
            logging.getLogger(name).removeHandler(records)


def _raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as caught:
        return caught


def test_ray_logs_a_full_disk_in_one_line(ray_logs: _Records) -> None:
    full = _raised(OSError(errno.ENOSPC, "No space left on device"))
    state = logging.getLogger("ray.tune.execution.experiment_state")
    state.error("Saving experiment state to storage at 'x' failed with exception: ", exc_info=full)
    assert ray_logs.lines == [
        "Saving experiment state to storage at 'x' failed with exception: "
        "[Errno 28] No space left on device"
    ]
    controller = logging.getLogger("ray.tune.execution.tune_controller")
    controller.error("Trial task failed for trial t1", exc_info=full)  # the guard says it
    assert len(ray_logs.lines) == 1
    other = _raised(ValueError("diverged"))
    controller.error("Trial task failed for trial t2", exc_info=other)  # left as it is
    assert ray_logs.lines[-1].startswith("Trial task failed for trial t2\nTraceback")
    quiet_disk_full_logs()  # again: one filter, not two (beside other modules' own)
    kinds = [type(f).__name__ for f in logging.getLogger("ray.tune.tune").filters]
    assert kinds.count("_DiskFullOneLine") == 1, kinds


def test_the_trial_fields_the_guard_reads_exist_in_this_ray() -> None:
    """The guard clears a full disk's failure from Tune's trial metadata the way Tune
    does when it resumes a trial: the fields must be where it looks."""
    from ray.tune.experiment import Trial
    from ray.tune.trainable.metadata import _TrainingRunMetadata

    metadata = _TrainingRunMetadata()
    for name in ("num_failures", "error_filename", "pickled_error_filename"):
        assert hasattr(metadata, name)
    assert callable(metadata.invalidate_cache)
    for name in ("run_metadata", "local_path", "path", "storage"):
        assert hasattr(Trial, name) or name in Trial.__init__.__code__.co_names
