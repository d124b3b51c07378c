"""A ``--resume``'s state files damaged (cut short, emptied, overwritten with random bytes):
each is named in one line with how to recover, before Ray starts, and nothing is
written. Real files: an Optuna sqlite study, an MLflow sqlite store, Tune's JSON and
pickle state files, the search record."""

from __future__ import annotations

import functools
import json
import pickle
import random
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import optuna
import pytest
from mlflow.tracking import MlflowClient

from gridsearch import _damage
from gridsearch._damage import DamagedState
from gridsearch.run import main
from gridsearch.settings import SearchError, SearchSettings, parse_args

EXPERIMENT = "dmg"


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _random(path: Path) -> None:
    size = max(path.stat().st_size, 4096)
    path.write_bytes(random.Random(0).randbytes(size))


def _scrambled_pages(path: Path) -> None:
    """An sqlite file whose header survives and whose pages after the first do not."""
    data = bytearray(path.read_bytes())
    noise = random.Random(1).randbytes(len(data) - 4096)
    data[4096:] = noise
    path.write_bytes(bytes(data))


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated": _truncate,
    "zero bytes": _empty,
    "random bytes": _random,
}
SQLITE_DAMAGE = {**DAMAGE, "pages overwritten": _scrambled_pages}


def _study(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    study = optuna.create_study(study_name=EXPERIMENT, storage=f"sqlite:///{path}")
    study.add_trial(
        optuna.trial.create_trial(
            params={"margin": 0.2},
            distributions={"margin": optuna.distributions.FloatDistribution(0.1, 0.3)},
            value=0.5,
        )
    )
    return path


@functools.cache
def _tracking_bytes() -> bytes:
    """A small MLflow sqlite store (an experiment, a run, a metric), made by MLflow once a
    process: its schema's migrations cost about 1 CPU-s, which every case paid before."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "mlflow.db"
        client = MlflowClient(f"sqlite:///{path}")
        experiment = client.create_experiment(EXPERIMENT)
        run = client.create_run(experiment)
        client.log_metric(run.info.run_id, "dev/r10_mean", 0.5)
        return path.read_bytes()


def _tracking(path: Path) -> Path:
    path.write_bytes(_tracking_bytes())
    return path


def _tune_folder(folder: Path) -> Path:
    """The files of a Tune experiment a resume reads, in Tune's formats."""
    folder.mkdir(parents=True, exist_ok=True)
    state = {"trial_data": [["{}", "{}"]], "runner_data": {}, "stats": {"start_time": 1.0}}
    (folder / "experiment_state-2026-01-01_00-00-00.json").write_text(json.dumps(state))
    # Tune pickles the search generator's state into a file it names .json
    (folder / "search_gen_state-2026-01-01_00-00-00.json").write_bytes(pickle.dumps({"n": 1}))
    (folder / "tuner.pkl").write_bytes(pickle.dumps({"config": list(range(100))}))
    (folder / "searcher-state-2026-01-01_00-00-00.pkl").write_bytes(pickle.dumps([1.0] * 50))
    return folder


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("damage", list(SQLITE_DAMAGE))
def test_a_damaged_study_is_named_with_its_recovery(tmp_path: Path, damage: str) -> None:
    path = _study(tmp_path / f"{EXPERIMENT}.optuna.db")
    _damage.check_study(path, EXPERIMENT, EXPERIMENT)  # intact: nothing to say
    SQLITE_DAMAGE[damage](path)
    before = path.read_bytes()
    with pytest.raises(DamagedState) as caught:
        _damage.check_study(path, EXPERIMENT, EXPERIMENT)
    text = _one_line(caught.value)
    assert text.startswith(f"the Optuna study {path} is damaged (")
    assert ".recover" in text and "MLflow" in text
    assert path.read_bytes() == before  # read only
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no journal left


def test_a_study_file_without_the_study(tmp_path: Path) -> None:
    path = _study(tmp_path / "other.optuna.db")
    with pytest.raises(DamagedState, match="no study named 'elsewhere'"):
        _damage.check_study(path, "elsewhere", "elsewhere")


@pytest.mark.parametrize("damage", list(SQLITE_DAMAGE))
def test_a_damaged_tracking_store_is_named(tmp_path: Path, damage: str) -> None:
    path = _tracking(tmp_path / "mlflow.db")
    _damage.check_tracking(path, EXPERIMENT)
    SQLITE_DAMAGE[damage](path)
    before = path.read_bytes()
    with pytest.raises(DamagedState) as caught:
        _damage.check_tracking(path, EXPERIMENT)
    text = _one_line(caught.value)
    assert text.startswith(f"the MLflow tracking store {path} is damaged (")
    assert "move it aside" in text and path.read_bytes() == before


def test_a_missing_tracking_store_is_left_to_mlflow(tmp_path: Path) -> None:
    _damage.check_tracking(tmp_path / "mlflow.db", EXPERIMENT)
    assert not (tmp_path / "mlflow.db").exists()


TUNE_FILES = (
    "experiment_state-2026-01-01_00-00-00.json",
    "search_gen_state-2026-01-01_00-00-00.json",
    "tuner.pkl",
    "searcher-state-2026-01-01_00-00-00.pkl",
)


@pytest.mark.parametrize("name", TUNE_FILES)
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_tune_state_file_is_named(tmp_path: Path, name: str, damage: str) -> None:
    folder = _tune_folder(tmp_path / EXPERIMENT)
    _damage.check_tune_state(folder, EXPERIMENT)
    DAMAGE[damage](folder / name)
    with pytest.raises(DamagedState) as caught:
        _damage.check_tune_state(folder, EXPERIMENT)
    text = _one_line(caught.value)
    assert f"{folder / name} is damaged (" in text and f"--warm-start {EXPERIMENT}" in text


def test_a_damaged_newest_state_falls_back_to_the_previous_one(tmp_path: Path) -> None:
    folder = _tune_folder(tmp_path / EXPERIMENT)
    newest = folder / "experiment_state-2026-01-02_00-00-00.json"
    newest.write_text(json.dumps({"trial_data": [], "runner_data": {}}) * 3)
    _truncate(newest)
    with pytest.raises(DamagedState) as caught:
        _damage.check_tune_state(folder, EXPERIMENT)
    text = _one_line(caught.value)
    assert "cut short" in text and f"mv {newest} {newest}.damaged" in text
    assert "experiment_state-2026-01-01_00-00-00.json" in text


def test_error_files_cut_short_are_removed_whole_ones_kept(tmp_path: Path) -> None:
    folder = tmp_path / EXPERIMENT
    whole, cut, empty = (folder / f"trial_{k}" / "error.pkl" for k in "abc")
    for path in (whole, cut, empty):
        path.parent.mkdir(parents=True)
        path.write_bytes(pickle.dumps(OSError(28, "No space left on device")))
    _truncate(cut)
    _empty(empty)
    assert sorted(_damage.repair_error_files(folder)) == sorted([cut, empty])
    assert whole.exists() and not cut.exists() and not empty.exists()


def _recorded(runs: Path) -> SearchSettings:
    """A search's record, as a search writes it when it starts."""
    args = ["--space", "margin_sweep", "--smoke-test", "--experiment", EXPERIMENT,
            "--runs-dir", str(runs), "--no-dashboard"]  # fmt: skip
    settings = SearchSettings.from_args(parse_args(args))
    settings.save_record(num_samples=2)
    return settings


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and "locks" not in p.parts
    }


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_record_is_one_line(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    settings = _recorded(runs)
    DAMAGE[damage](settings.layout.record(EXPERIMENT))
    before = _files(runs)
    code = main(["--experiment", EXPERIMENT, "--resume", "--runs-dir", str(runs)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: --resume: "), err
    assert "not a readable search record" in err[0] and _files(runs) == before


@pytest.mark.parametrize("which", ["study", "tracking", "tune"])
@pytest.mark.parametrize(
    ("damage", "moved"),
    [*((damage, False) for damage in DAMAGE), ("truncated", True)],
    ids=[*DAMAGE, "truncated, moved"],
)
def test_resume_names_a_damaged_state_file_before_ray_starts(
    tmp_path: Path, which: str, damage: str, moved: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """Also in a runs directory moved since the search started: the damage is named
    before the move is taken in (which rewrites the state files), so nothing is written."""
    runs = tmp_path / "runs"
    settings = _recorded(runs)
    study = _study(Path(settings.optuna_storage.removeprefix("sqlite:///")))
    tracking = _tracking(runs / "mlflow.db")
    tune = _tune_folder(Path(settings.experiment_path))
    DAMAGE[damage]({"study": study, "tracking": tracking, "tune": tune / "tuner.pkl"}[which])
    if moved:
        runs = runs.rename(tmp_path / "elsewhere")
    resume = ["--experiment", EXPERIMENT, "--resume", "--runs-dir", str(runs)]
    with pytest.raises(SearchError) as caught:  # the library call
        _damage.check_resume_state(SearchSettings.from_argv(resume))
    assert str(runs) in str(caught.value)  # the file where it is now
    before = _files(runs)
    capsys.readouterr()  # what setting the files up printed
    code = main(resume)
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert code == 2 and err == [f"error: {caught.value}"], captured
    assert "Ray dashboard" not in captured.out and "Traceback" not in captured.err
    assert _files(runs) == before


def test_a_state_file_another_live_driver_is_writing_names_that_driver(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file half-written by the driver running the experiment is no damage: the
    resume is refused for that driver, named, before any state file is judged."""
    import dataclasses
    import os

    from gridsearch._lock import Holder

    runs = tmp_path / "runs"
    settings = _recorded(runs)
    _study(Path(settings.optuna_storage.removeprefix("sqlite:///")))
    _tracking(runs / "mlflow.db")
    _empty(_tune_folder(Path(settings.experiment_path)) / "tuner.pkl")  # mid-write
    lock = settings.layout.lock(EXPERIMENT)
    lock.parent.mkdir(parents=True, exist_ok=True)
    writer = dataclasses.replace(Holder.me(), pid=os.getppid(), started="")  # alive
    lock.write_text(json.dumps(dataclasses.asdict(writer)))
    capsys.readouterr()
    code = main(["--experiment", EXPERIMENT, "--resume", "--runs-dir", str(runs)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: --experiment {EXPERIMENT} is being run by"), err
    assert f"pid {writer.pid}" in err[0]


class _FailedTrial:
    """What the guard reads of a Tune trial that failed once: its folder (Tune's
    staging folder) and its run metadata (Ray's own), as Tune leaves them."""

    def __init__(self, local_path: Path) -> None:
        from ray.tune.trainable.metadata import _TrainingRunMetadata

        self.local_path = str(local_path)
        self.run_metadata: Any = cast(Any, _TrainingRunMetadata())
        self.run_metadata.num_failures = 1
        self.run_metadata.error_filename = "error.txt"
        self.run_metadata.pickled_error_filename = "error.pkl"


@pytest.mark.parametrize(
    ("text", "stops"),
    [("OSError: [Errno 28] No space left on device", True), ("ValueError: diverged", False)],
)
def test_a_trial_failing_for_a_full_disk_stops_the_search(
    tmp_path: Path, text: str, stops: bool
) -> None:
    from gridsearch._interrupt import DiskGuard, Interruption

    folder = tmp_path / "trial_a"
    folder.mkdir()
    (folder / "error.txt").write_text(f"Failure # 1\n{text}\n")
    (folder / "error.pkl").write_bytes(b"")  # cut short by the full disk
    interruption = Interruption()
    guard = DiskGuard([tmp_path], 0, interruption, reserve_bytes=0)
    trial = _FailedTrial(folder)
    # Tune's graceful stop is SIGUSR1; recorded here instead of a running Tune
    received: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: received.append(signum))
    try:
        guard.on_trial_recover(0, [], trial)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    if stops:
        assert received == [signal.SIGUSR1] and interruption.reason is not None
        assert interruption.reason.startswith(f"no space left on {tmp_path}")
        assert trial.run_metadata.num_failures == 0  # not counted against the trial
        assert trial.run_metadata.error_filename is None
    else:
        assert received == [] and interruption.reason is None
        assert trial.run_metadata.num_failures == 1  # the trial's own failure
    assert not (folder / "error.pkl").exists()
