"""Real drivers (the CLI in subprocesses, real Ray, real MLflow sqlite) meeting each other
and their environment: one driver per experiment, two experiments side by side on a fresh
runs directory (the first then extended: test_resume_extend.py's checks), and a disk that
fills mid-search (SIGTERM as a graceful stop: test_interrupted.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

import gridsearch.driver  # noqa: F401  (imported now: the in-process drivers below start at once)
from gridsearch.run import main
from tests.gridsearch.test_resume_extend import extends_a_finished_search
from tests.processes import finish

pytestmark = pytest.mark.slow
SEARCH = [
    "--space", "margin_sweep", "--smoke-test", "--no-dashboard", "--scheduler", "fifo",
    "--max-concurrent", "1",
]  # fmt: skip


class Driver:
    """``python -m gridsearch.run ARGS`` in a subprocess, its output read as it comes."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gridsearch.run", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: list[str] = []

    def wait_for(self, text: str, timeout_s: float = 300) -> None:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout_s
        for line in self.process.stdout:
            self.lines.append(line)
            if text in line:
                return
            assert time.monotonic() < deadline, f"no {text!r} in {timeout_s} s"
        raise AssertionError(f"the driver ended without {text!r}:\n{''.join(self.lines)}")

    def finish(self, timeout_s: float = 300) -> tuple[int, str]:
        rest, _ = finish(self.process, timeout_s)
        return self.process.returncode, "".join(self.lines) + rest


def _trial_runs(mlflow_runs, runs_dir: Path, experiment: str) -> list:
    _, runs = mlflow_runs(runs_dir, experiment)
    assert not [r for r in runs if r.info.status == "RUNNING"]
    return [r for r in runs if r.data.tags.get("search.role") == "trial"]


def test_one_driver_per_experiment_and_two_experiments_side_by_side(
    tmp_path: Path, mlflow_runs, capsys: pytest.CaptureFixture[str], on_cluster: list[str]
) -> None:
    """A second driver of a running experiment is refused (a new search and a --resume),
    naming the one that runs it; two experiments run side by side on a runs directory that
    neither had set up; each lock is released. The first, finished, is then extended."""
    runs = str(tmp_path / "runs")  # fresh: the first two drivers set up its stores at once
    # a runs long enough (2 trials, one at a time: after the first's epoch 1 another epoch,
    # then a whole trial) to still hold its lock while the two refused drivers below run
    # in this process (no imports left to them: a few milliseconds each)
    a = Driver(*SEARCH, "--num-samples", "2", "--runs-dir", runs, "--experiment", "a", *on_cluster)
    b = Driver(*SEARCH, "--num-samples", "1", "--runs-dir", runs, "--experiment", "b", *on_cluster)
    a.wait_for("epoch 1/2")
    assert main([*SEARCH, "--runs-dir", runs, "--experiment", "a", *on_cluster]) == 2  # a new one
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a already holds a search" in err[0]
    assert main(["--runs-dir", runs, "--experiment", "a", "--resume", *on_cluster]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --experiment a is being run by")
    assert f"pid {a.process.pid}" in err[0] and "since" in err[0]
    finished = {}
    for driver, summary in ((a, "2 trials: 2 finished"), (b, "1 trial: 1 finished")):
        code, finished[driver] = driver.finish()
        assert code == 0, finished[driver]
        assert summary in finished[driver]
    assert len(_trial_runs(mlflow_runs, Path(runs), "a")) == 2
    assert len(_trial_runs(mlflow_runs, Path(runs), "b")) == 1
    assert not list((Path(runs) / "locks").glob("*.lock"))  # every lock released
    # a, a search that ran to its end at once: its closing lines, then extended to 3 trials
    # in this process, then nothing left to run
    extends_a_finished_search(
        Path(runs).resolve(), "a", finished[a], capsys, mlflow_runs, on_cluster
    )


def _mount_tmpfs(where: Path, megabytes: int) -> bool:
    where.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(where)],
        capture_output=True,
    )
    return result.returncode == 0


def test_a_full_disk_stops_the_search_resumably(
    tmp_path: Path, mlflow_runs, capsys, on_cluster: list[str]
) -> None:
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, 64):
        pytest.skip("cannot mount a small tmpfs here (needs root and CAP_SYS_ADMIN)")
    try:
        runs = disk / "runs"
        args = [*SEARCH, "--num-samples", "2", "--runs-dir", str(runs), "--experiment", "d",
                *on_cluster]  # fmt: skip
        driver = Driver(*args, "--min-free-disk", "24")
        driver.wait_for("epoch 1/2")
        free = shutil.disk_usage(disk).free
        ballast = disk / "ballast"
        with ballast.open("wb") as handle:  # leave 12 MB: below the search's 24
            handle.write(b"\0" * (free - 12 * 2**20))
        code, out = driver.finish(timeout_s=180)
        assert code == 2, out
        errors = [line for line in out.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and f"no space left on {runs}" in errors[0], out
        assert "MiB free" in errors[0] and "--resume" in errors[0]
        assert "Traceback" not in out
        trials = _trial_runs(mlflow_runs, runs, "d")  # every run closed with its outcome
        assert all(r.data.tags["outcome"] in ("finished", "search_ended") for r in trials)
        ballast.unlink()
        resume = ["--experiment", "d", "--resume", "--runs-dir", str(runs), *on_cluster]
        assert main(resume) == 0
        assert "2 trials: 2 finished" in capsys.readouterr().out
        trials = _trial_runs(mlflow_runs, runs, "d")
        assert len(trials) == 2 and {r.data.tags["outcome"] for r in trials} == {"finished"}
        study = optuna.load_study(
            study_name="d", storage=f"sqlite:///{runs / 'tune' / 'd.optuna.db'}"
        )
        assert sorted(t.number for t in study.trials) == [0, 1]
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
