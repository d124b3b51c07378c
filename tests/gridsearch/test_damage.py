"""A ``--resume``'s state files damaged (cut short, emptied, overwritten with random bytes):
each is named in one line with how to recover, before Ray starts, and nothing is
written. Real files: an Optuna sqlite study, an MLflow sqlite store, Tune's JSON and
pickle state files, the search record."""

from __future__ import annotations

import functools
import json
import pickle
import random
import re
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
from gridsearch._relocate import relocate
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


DEEP = 100_000


def _deeply_nested(path: Path) -> None:
    """A whole pickle of a dictionary with the keys Tune's tuner.pkl holds, one of them
    nested ``DEEP`` lists deep: every opcode in place, nothing to call, and not what Tune
    wrote (its restore failed on it, deep inside Tune, with the parent run left open)."""
    nested = b"]" * DEEP + b"a" * (DEEP - 1)  # EMPTY_LIST each, then APPEND each
    path.write_bytes(b"\x80\x04}\x8c\x0c_tune_config" + nested + b"s\x8c\x0b_run_config" + b"Ns.")


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated": _truncate,
    "zero bytes": _empty,
    "random bytes": _random,
    "deeply nested": _deeply_nested,
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
    (folder / "experiment_state-2026-01-01_00-00-00.json").write_text(json.dumps(_state()))
    # Tune pickles the search generator's state into a file it names .json
    generator = {"counter": 2, "total_samples": 2, "finished": True}
    (folder / "search_gen_state-2026-01-01_00-00-00.json").write_bytes(pickle.dumps(generator))
    tuner = {"_tune_config": {"metric": "m"}, "_run_config": {}, "config": list(range(100))}
    (folder / "tuner.pkl").write_bytes(pickle.dumps(tuner))
    searcher = {"_metric": "m", "_points": [1.0] * 50}
    (folder / "searcher-state-2026-01-01_00-00-00.pkl").write_bytes(pickle.dumps(searcher))
    return folder


def _state(**changed: Any) -> dict[str, Any]:
    """An experiment state of one trial, its fields as Tune writes them (the trial's,
    then its run metadata's) changed by ``changed``."""
    trial = {"trial_id": "a1b2c3d4_00000", "status": "TERMINATED", "config": {}}
    metadata = {"num_failures": 0, "num_failures_after_restore": 0, "error_filename": None,
                "pickled_error_filename": None, "last_result": {"epoch": 2}}  # fmt: skip
    for key, value in changed.items():
        (trial if key in trial else metadata)[key] = value
    entry = [json.dumps(trial), json.dumps(metadata)]
    return {"trial_data": [entry], "runner_data": {}, "stats": {"start_time": 1.0}}


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


HOSTILE = (None, True, -1, 1.5, "fortran", "", [], {}, {"a": [1]}, "x" * 1000, 2**70)
# what each field of a trial in the experiment state may be (anything else is refused)
VALID = {
    "trial_id": lambda v: isinstance(v, str) and v.replace("_", "").isalnum(),
    "status": lambda v: v in ("PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR"),
    "num_failures": lambda v: type(v) is int and v >= 0,
    "num_failures_after_restore": lambda v: type(v) is int and v >= 0,
    "last_result": lambda v: isinstance(v, dict),
    "error_filename": lambda v: v is None or isinstance(v, str),
    "pickled_error_filename": lambda v: v is None or isinstance(v, str),
}


def test_every_field_of_a_trial_in_the_experiment_state_is_checked(tmp_path: Path) -> None:
    """Each field a resume reads back, every hostile type: refused in one line naming the
    file and the field, or (a value of its type) taken."""
    folder = _tune_folder(tmp_path / EXPERIMENT)
    state = folder / "experiment_state-2026-01-01_00-00-00.json"
    for field, valid in VALID.items():
        for value in HOSTILE:
            state.write_text(json.dumps(_state(**{field: value})))
            if valid(value):
                _damage.check_tune_state(folder, EXPERIMENT)
                continue
            with pytest.raises(DamagedState) as caught:
                _damage.check_tune_state(folder, EXPERIMENT)
            text = _one_line(caught.value)
            assert text.startswith(f"the Tune experiment state {state} is not what Tune "), text
            assert f"trial_data[0]: field {field!r}: " in text and len(text) < 500, text
    shapes = {
        "[]": "a JSON list, expected an object",
        '{"trial_data": {}, "runner_data": {}, "stats": {}}': "field 'trial_data'",
        '{"trial_data": [], "runner_data": [], "stats": {}}': "field 'runner_data'",
        '{"trial_data": [["{}"]], "runner_data": {}, "stats": {}}': "trial_data[0]: expected",
        '{"trial_data": [[1, 2]], "runner_data": {}, "stats": {}}': "trial_data[0]: expected",
        '{"trial_data": [["x", "y"]], "runner_data": {}, "stats": {}}': "trial_data[0]: not JSON",
    }
    for text, said in shapes.items():
        state.write_text(text)
        with pytest.raises(DamagedState, match=re.escape(said)):
            _damage.check_tune_state(folder, EXPERIMENT)


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        ("tuner.pkl", [1, 2], "it holds a list, not Tune's dictionary"),
        ("tuner.pkl", {"_run_config": {}}, "no key '_tune_config'"),
        ("tuner.pkl", "text", "it holds a value"),
        ("search_gen_state-2026-01-01_00-00-00.json", {"counter": 1}, "no key 'total_samples'"),
        ("searcher-state-2026-01-01_00-00-00.pkl", (1, 2), "it holds a tuple"),
    ],
)
def test_a_whole_tune_pickle_of_another_shape_is_named(
    tmp_path: Path, name: str, content: object, said: str
) -> None:
    folder = _tune_folder(tmp_path / EXPERIMENT)
    (folder / name).write_bytes(pickle.dumps(content))
    with pytest.raises(DamagedState) as caught:
        _damage.check_tune_state(folder, EXPERIMENT)
    text = _one_line(caught.value)
    assert f"{folder / name} is damaged ({said}" in text, text


def test_a_deeply_nested_tuner_pickle_is_named_with_its_depth(tmp_path: Path) -> None:
    folder = _tune_folder(tmp_path / EXPERIMENT)
    _deeply_nested(folder / "tuner.pkl")
    with pytest.raises(DamagedState, match=f"nested {DEEP + 1:,} deep; Tune's are at most 200"):
        _damage.check_tune_state(folder, EXPERIMENT)


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


@pytest.mark.parametrize("name", TUNE_FILES)
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_state_file_with_its_last_whole_copy_is_restored_from_it(
    tmp_path: Path, name: str, damage: str
) -> None:
    """A state file cut short (or otherwise damaged) whose last whole copy the search kept
    (``.whole/``): no error; the check writes nothing; the repair moves the damaged file
    aside and puts the copy in its place, in a line."""
    folder = _tune_folder(tmp_path / EXPERIMENT)
    (folder / _damage.WHOLE_COPIES).mkdir()
    whole = (folder / name).read_bytes()
    (folder / _damage.WHOLE_COPIES / name).write_bytes(whole)
    DAMAGE[damage](folder / name)
    damaged = (folder / name).read_bytes()
    _damage.check_tune_state(folder, EXPERIMENT)  # the copy is what the resume reads
    assert (folder / name).read_bytes() == damaged  # checked only
    (said,) = _damage.restore_whole_copies(folder)
    assert said.startswith(f"{folder / name} was damaged (") and "last whole copy" in said
    assert (folder / name).read_bytes() == whole
    assert (folder / f"{name}.damaged").read_bytes() == damaged
    _damage.check_tune_state(folder, EXPERIMENT)
    assert _damage.restore_whole_copies(folder) == []


def test_a_moved_runs_directory_puts_the_whole_copy_back_before_the_move_is_taken_in(
    tmp_path: Path,
) -> None:
    """The driver's order: the repair first (a pickle cut short cannot be rewritten
    string by string), then the relocation, which rewrites the restored file and the
    copies too."""
    runs = tmp_path / "runs"
    settings = _recorded(runs)
    _study(Path(settings.optuna_storage.removeprefix("sqlite:///")))
    tune = _tune_folder(Path(settings.experiment_path))
    (tune / _damage.WHOLE_COPIES).mkdir()
    tuner = {"_tune_config": {}, "_run_config": {"storage": str(runs / "tune")}}
    for folder in (tune, tune / _damage.WHOLE_COPIES):
        (folder / "tuner.pkl").write_bytes(pickle.dumps(tuner))
    _truncate(tune / "tuner.pkl")
    moved = runs.rename(tmp_path / "elsewhere")
    resumed = SearchSettings.from_argv(
        ["--experiment", EXPERIMENT, "--resume", "--runs-dir", str(moved)]
    )
    (said,) = _damage.check_resume_state(resumed)
    assert "tuner.pkl was damaged" in said
    relocate(resumed)
    for path in (moved / "tune" / EXPERIMENT / "tuner.pkl",
                 moved / "tune" / EXPERIMENT / _damage.WHOLE_COPIES / "tuner.pkl"):  # fmt: skip
        assert pickle.loads(path.read_bytes())["_run_config"]["storage"] == str(moved / "tune")
