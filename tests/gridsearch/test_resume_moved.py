"""A search lives where its runs directory is now: ``--resume`` of a copy continues the
copy and writes nothing into the original; a moved one (also through a symbolic link)
resumes where it is; a read-only one is refused before any write with one ``error:``
line. The real CLI, a real local Ray, real MLflow and Optuna sqlite stores."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import stat
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient

from gridsearch._layout import RunsLayout, rebase
from gridsearch._relocate import rebase_pickle
from gridsearch.run import main
from gridsearch.settings import SearchError, SearchSettings
from tests.gridsearch.test_drivers import Driver

# one trial at a time (the record keeps it for the resumes): the copy's resume trains its
# two trials in one reused trial process, not two
SEARCH = [
    "--space", "margin_sweep", "--smoke-test", "--no-dashboard", "--scheduler", "fifo",
    "--max-concurrent", "1",
]  # fmt: skip


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``root``: (size, modification time in ns)."""
    return {
        str(path.relative_to(root)): (path.lstat().st_size, path.lstat().st_mtime_ns)
        for path in [root, *root.rglob("*")]
    }


def _resume(runs: Path, on_cluster: list[str], *more: str) -> list[str]:
    return ["--experiment", "m", "--resume", "--runs-dir", str(runs), *on_cluster, *more]


@pytest.mark.slow
def test_a_copy_a_move_a_link_and_a_read_only_runs_directory(
    tmp_path: Path, mlflow_runs, capsys: pytest.CaptureFixture[str], on_cluster: list[str]
) -> None:
    """One trial, interrupted mid-way: the copy and the moved original each finish it, the
    copy's resume also runs one more (an extension); one trial is enough to show which
    study, record and MLflow store each resume wrote (two cost a trial process more in
    each of the three drivers)."""
    runs = tmp_path / "runs"
    driver = Driver(*SEARCH, "--num-samples", "1", "--runs-dir", str(runs), "--experiment", "m",
                    *on_cluster)  # fmt: skip
    driver.wait_for("epoch 1/2")
    driver.process.send_signal(signal.SIGINT)
    code, out = driver.finish(timeout_s=300)
    assert code == 130, out

    copy = tmp_path / "copy"
    shutil.copytree(runs, copy, symlinks=True)
    original = _tree(runs)

    if os.geteuid() != 0:  # root writes through chmod: nothing to refuse there
        frozen = tmp_path / "frozen"
        shutil.copytree(runs, frozen, symlinks=True)
        for path in [frozen, *frozen.rglob("*")]:
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        before = _tree(frozen)
        assert main(_resume(frozen, on_cluster)) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: --runs-dir "), err
        assert _tree(frozen) == before and _tree(runs) == original
        for path in [frozen, *frozen.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)

    assert main(_resume(copy, on_cluster, "--num-samples", "2")) == 0  # the copy, extended
    out = capsys.readouterr().out
    assert f"the search started in {runs}" in out and "2 trials: 2 finished" in out
    assert _tree(runs) == original  # nothing written into the original
    record = json.loads(RunsLayout.at(copy).record("m").read_text())
    assert str(runs) not in json.dumps(record) and record["num_samples"] == 2
    for state in (copy / "tune" / "m").glob("*.pkl"):
        assert str(runs).encode() not in state.read_bytes(), state
    client, found = mlflow_runs(copy, "m")
    assert (
        client.get_experiment_by_name("m").artifact_location
        == (copy / "mlartifacts" / "m").as_uri()
    )
    assert all(r.info.artifact_uri.startswith(copy.as_uri()) for r in found)
    assert (copy / "mlartifacts" / "m").is_dir()
    model = MlflowClient(f"sqlite:///{copy / 'mlflow.db'}").get_registered_model(
        "grounded-margin_sweep"
    )
    assert model.aliases  # registered in the copy's store
    study = optuna.load_study(study_name="m", storage=f"sqlite:///{copy / 'tune' / 'm.optuna.db'}")
    assert len(study.trials) == 2
    assert len(optuna.load_study(
        study_name="m", storage=f"sqlite:///{runs / 'tune' / 'm.optuna.db'}"
    ).trials) == 1  # fmt: skip

    moved = tmp_path / "moved"
    runs.rename(moved)  # the original, still interrupted, moved; then reached by a link
    link = tmp_path / "link"
    link.symlink_to(moved)
    copied = _tree(copy)
    assert main(_resume(link, on_cluster)) == 0
    out = capsys.readouterr().out
    assert _tree(copy) == copied  # nothing written into the copy, its artifacts neither
    assert "1 trial: 1 finished" in out
    assert f"--resume --runs-dir {moved}" in out  # the real path
    assert not runs.exists()  # nothing recreated where it was
    _, found = mlflow_runs(moved, "m")
    (parent,) = [r for r in found if r.data.tags.get("search.role") == "search"]
    assert parent.info.status == "FINISHED" and parent.info.artifact_uri.startswith(moved.as_uri())


def test_a_pickle_is_rebased_without_being_run(tmp_path: Path) -> None:
    old, new = Path("/data/runs"), Path("/elsewhere/a much longer runs directory" + "x" * 300)
    value = {
        "storage": "sqlite:////data/runs/tune/e.optuna.db",
        "paths": ["/data/runs", "/data/runs/tune", "/data/runs2", "/x/data/runs"],
        "shared": "/data/runs/tune",
        "other": b"/data/runs",  # bytes are not paths here
    }
    value["again"] = value["paths"]  # memoised references survive
    for protocol in (2, 4, 5):
        moved = pickle.loads(rebase_pickle(pickle.dumps(value, protocol=protocol), old, new))
        assert moved["storage"] == f"sqlite:///{new}/tune/e.optuna.db"
        assert moved["paths"] == [str(new), f"{new}/tune", "/data/runs2", "/x/data/runs"]
        assert moved["again"] is moved["paths"]
        if protocol >= 3:  # (protocol 2 spells bytes as a latin-1 text: rebased too)
            assert moved["other"] == b"/data/runs"


def test_rebase_names_paths_under_the_old_place_only() -> None:
    old, new = Path("/r/runs"), Path("/n/new runs")
    assert rebase("sqlite:////r/runs/mlflow.db", old, new) == "sqlite:////n/new runs/mlflow.db"
    assert rebase("file:///r/runs/mlartifacts/e", old, new) == "file:///n/new runs/mlartifacts/e"
    assert rebase('{"uri": "/r/runs/world"}', old, new) == '{"uri": "/n/new runs/world"}'
    for untouched in ("/r/runs2/x", "/x/r/runs", "/r/runs.db", "relative/r/runs"):
        assert rebase(untouched, old, new) == untouched
    assert rebase("file:///r/a%20b/x", Path("/r/a b"), new) == "file:///n/new%20runs/x"


def _record(runs: Path, *more: str) -> SearchSettings:
    settings = SearchSettings.from_argv(
        ["--space", "margin_sweep", "--runs-dir", str(runs), "--experiment", "e", *more]
    )
    settings.save_record(num_samples=2)
    return settings


def test_settings_of_a_moved_runs_directory_name_it(tmp_path: Path) -> None:
    """The record's paths under the old runs directory name the new one; a path given
    outside it stays; a Tune experiment that is not there is refused naming both."""
    old, elsewhere = tmp_path / "old", tmp_path / "shared"
    _record(old, "--storage-path", str(elsewhere))
    (elsewhere / "e").mkdir(parents=True)
    new = tmp_path / "new"
    old.rename(new)
    settings = SearchSettings.from_argv(["--resume", "--experiment", "e", "--runs-dir", str(new)])
    assert settings.layout.root == new.resolve() and settings.moved_from == old.resolve()
    assert settings.tracking_uri == f"sqlite:///{new.resolve()}/mlflow.db"
    assert settings.storage_path == str(elsewhere)  # given outside the runs directory
    assert settings.optuna_storage == f"sqlite:///{elsewhere}/e.optuna.db"
    assert "moved_from" not in settings.to_record()

    inside = tmp_path / "inside"
    _record(inside)  # its Tune experiment under the runs directory, never created
    gone = tmp_path / "gone"
    inside.rename(gone)
    with pytest.raises(SearchError) as refused:
        SearchSettings.from_argv(["--resume", "--experiment", "e", "--runs-dir", str(gone)])
    message = str(refused.value)
    assert f"started in the runs directory {inside.resolve()}" in message
    assert f"--runs-dir {gone.resolve()}" in message and "is not there" in message
