"""The search's settings: typed and validated from the command line, every path of a
runs directory in one place, and the record --resume rebuilds them from."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path

import pytest

from gridsearch._flags import COUNT_BOUNDS
from gridsearch._layout import RunsLayout
from gridsearch.settings import SearchError, SearchSettings


def test_searches_started_in_the_same_second_get_different_default_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["--space", "margin_sweep", "--runs-dir", str(tmp_path)]
    monkeypatch.setattr(time, "strftime", lambda fmt, *when: "20261127-233845")  # one second
    first, second = (SearchSettings.from_argv(argv).experiment for _ in range(2))
    assert first.startswith("margin_sweep-20261127-233845-") and first != second


def test_defaults_from_a_short_command_line(tmp_path: Path) -> None:
    s = SearchSettings.from_argv(["--space", "margin_sweep", "--runs-dir", str(tmp_path)])
    assert (s.space, s.space_file, s.objective, s.scheduler) == (
        "margin_sweep", None, "retrieval", "auto",
    )  # fmt: skip
    assert re.fullmatch(r"margin_sweep-\d{8}-\d{6}-[0-9a-f]{6}", s.experiment), s.experiment
    assert s.layout == RunsLayout(tmp_path.resolve())
    assert s.storage_path == str(tmp_path.resolve() / "tune")
    assert s.tracking_uri == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    assert s.optuna_storage == (
        f"sqlite:///{tmp_path.resolve() / 'tune' / (s.experiment + '.optuna.db')}"
    )
    assert s.verify and s.dashboard and s.data is None and not s.resume
    assert s.metric == "dev/r10_mean_best" and s.mode == "max"
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.seed = 3  # type: ignore[misc]


def test_both_objectives_and_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text(
        "name: x\nparams: {margin: {type: float, low: 0.1, high: 0.2}}\n"
    )
    s = SearchSettings.from_argv(
        ["--space-file", "space.yaml", "--objective", "both", "--data", "store", "--no-verify",
         "--storage-path", "s3://bucket/tune", "--experiment", "e", "--no-dashboard"]
    )  # fmt: skip
    assert s.scheduler == "auto" and s.metric == ["dev/r10_mean_best", "dev/semantic_best"]
    assert s.space_file == tmp_path / "space.yaml"
    assert s.data == str(tmp_path / "store") and not s.verify and not s.dashboard
    # sqlite cannot live on s3: the study stays local
    assert s.optuna_storage == f"sqlite:///{tmp_path / 'runs' / 'optuna' / 'e.optuna.db'}"
    assert s.experiment_path == "s3://bucket/tune/e"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give --space NAME"),
        (["--space", "a", "--space-file", "b.yaml"], "not both"),
        (["--space", "a", "--tracking-wait", "-1"], "--tracking-wait: got -1, expected a number"),
        (["--space", "a", "--data-via", "uri"], "--data-via uri needs --data"),
        (["--space", "a", "--num-samples", "0"], "--num-samples: got 0, expected a positive"),
        (["--space", "a", "--epochs", "-1"], "--epochs: got -1, expected a non-negative"),
        (["--space", "a", "--max-failures", "-2"], "--max-failures: got -2"),
        (["--resume"], "--resume needs --experiment NAME"),
        (["--space", "a", "--warm-start", "../x"], "--warm-start '../x': expected a name"),
        (["--space", "a", "--warm-start", "nothing"], "--warm-start nothing: no search of"),
        (
            ["--resume", "--experiment", "e", "--warm-start", "x"],
            "--warm-start applies when a search starts",
        ),
        (["--resume", "--experiment", "nothing"], "no search named 'nothing'"),
    ],
)
def test_bad_settings_name_the_flag(tmp_path: Path, argv: list[str], message: str) -> None:
    with pytest.raises(SearchError, match=message):
        SearchSettings.from_argv([*argv, "--runs-dir", str(tmp_path)])


def test_the_record_round_trips_and_resume_keeps_only_what_it_may_change(tmp_path: Path) -> None:
    s = SearchSettings.from_argv(
        ["--space", "lr_bounds", "--runs-dir", str(tmp_path), "--experiment", "e", "--seed", "7",
         "--epochs", "3", "--address", "auto"]
    )  # fmt: skip
    path = s.save_record()
    assert path == tmp_path.resolve() / "searches" / "e.json"
    assert SearchSettings.from_record(json.loads(path.read_text())) == s
    resumed = SearchSettings.from_argv(  # the recorded --seed and --epochs, said again
        ["--resume", "--experiment", "e", "--runs-dir", str(tmp_path), "--no-dashboard",
         "--seed", "7", "--epochs", "3", "--tracking-wait", "5"]
    )  # fmt: skip
    assert resumed.resume and not resumed.dashboard and resumed.address is None
    assert resumed.tracking_wait_s == 5.0
    assert (resumed.seed, resumed.epochs, resumed.experiment) == (7, 3, "e")  # the record's
    assert (
        dataclasses.replace(
            resumed, resume=False, dashboard=True, address="auto", tracking_wait_s=300.0
        )
        == s
    )


# every flag of the search's command line: another value than the recorded search's
# (RECORDED), or None for a flag a --resume reads (or handles before: --list-spaces,
# --warm-start refused on its own). A flag added to the parser fails the test until it
# is put here.
OTHER_VALUE: dict[str, list[str] | None] = {
    "space": ["--space", "lr_bounds"],
    "space_file": ["--space-file", "other.yaml"],
    "objective": ["--objective", "retrieval"],
    "scheduler": ["--scheduler", "asha"],
    "epochs": ["--epochs", "4"],
    "max_concurrent": ["--max-concurrent", "3"],
    "time_budget": ["--time-budget", "60"],
    "seed": ["--seed", "8"],
    "sampler": ["--sampler", "gp"],
    "seeds_per_config": ["--seeds-per-config", "3"],
    "fuse": ["--fuse", "4"],
    "engine": ["--engine", "sequential"],
    "recurrence": ["--recurrence", "python"],
    "full_size": ["--full-size"],
    "smoke_test": ["--smoke-test"],
    "data": ["--data", "other-store"],
    "senteval": ["--senteval", "other-senteval"],
    "no_verify": ["--no-verify"],
    "baselines": ["--baselines"],
    "data_via": ["--data-via", "uri"],
    "cpus_per_trial": ["--cpus-per-trial", "3"],
    "gpus_per_trial": ["--gpus-per-trial", "0.5"],
    "storage_path": ["--storage-path", "other-tune"],
    "tracking_uri": ["--tracking-uri", "sqlite:///other.db"],
    "optuna_storage": ["--optuna-storage", "sqlite:///other.optuna.db"],
    "max_failures": ["--max-failures", "5"],
    **dict.fromkeys(
        [
            "help",
            "list_spaces",
            "num_samples",
            "address",
            "no_dashboard",
            "dashboard_host",
            "runs_dir",
            "experiment",
            "resume",
            "warm_start",
            "min_free_disk",
            "tracking_wait",
            "quiet",
        ]
    ),
}
RECORDED = ["--space", "margin_sweep", "--objective", "semantic", "--scheduler", "fifo",
            "--epochs", "2", "--seed", "7", "--fuse", "2", "--seeds-per-config", "2",
            "--no-baselines", "--data", "store", "--max-concurrent", "2",
            "--cpus-per-trial", "1", "--senteval", "senteval"]  # fmt: skip


def test_every_flag_a_resume_would_not_follow_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A --resume continues a search with its recorded settings: a flag that would set
    one of them to another value is refused, one line naming the flag, the recorded
    value and the record (as --warm-start is), not silently ignored; the recorded value
    said again is what the resume does, and is taken."""
    from gridsearch._arguments import build_parser

    dests = {a.dest for a in build_parser()._actions}
    assert dests == set(OTHER_VALUE), "classify the new flag for --resume here"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "other.yaml").write_text("name: x\nparams: {margin: {type: float}}\n")
    runs = ["--runs-dir", str(tmp_path / "runs"), "--experiment", "e"]
    SearchSettings.from_argv([*RECORDED, *runs]).save_record(num_samples=4)
    resume = [*runs, "--resume"]
    record = tmp_path / "runs" / "searches" / "e.json"
    for other in OTHER_VALUE.values():
        if other is None:
            continue
        with pytest.raises(SearchError) as refused:
            SearchSettings.from_argv([*resume, *other])
        line = str(refused.value)
        assert "\n" not in line and line.startswith(f"{other[0]}"), line
        assert "continues the search 'e'" in line and str(record) in line, line
        assert f"leave {other[0]} out" in line, line
    said_again = SearchSettings.from_argv([*resume, *RECORDED, "--no-dashboard", "--quiet"])
    assert said_again == SearchSettings.from_argv([*resume, "--no-dashboard"])
    assert (said_again.objective, said_again.fuse, said_again.seeds_per_config) == (
        "semantic", 2, 2,
    )  # fmt: skip


def test_a_record_from_before_the_typed_settings_resumes(tmp_path: Path) -> None:
    """Searches started before this version wrote their parsed command line."""
    old = {"args": {"space": "margin_sweep", "runs_dir": str(tmp_path.resolve()), "seed": 4,
                    "experiment": "old", "num_samples": 3, "objective": "retrieval"}}  # fmt: skip
    RunsLayout.at(tmp_path).record("old").parent.mkdir(parents=True)
    RunsLayout.at(tmp_path).record("old").write_text(json.dumps(old))
    s = SearchSettings.from_argv(["--resume", "--experiment", "old", "--runs-dir", str(tmp_path)])
    assert (s.space, s.seed, s.num_samples, s.experiment, s.resume) == (
        "margin_sweep", 4, 3, "old", True,
    )  # fmt: skip


def test_layout_spells_every_path(tmp_path: Path) -> None:
    layout = RunsLayout.at(tmp_path)
    assert layout.world() == tmp_path.resolve() / "world"
    assert layout.world(smoke=True) == tmp_path.resolve() / "world-smoke"
    assert layout.report("e") == tmp_path.resolve() / "reports" / "e"
    assert layout.mlartifacts == tmp_path.resolve() / "mlartifacts"
    assert layout.optuna_db("e", str(layout.tune)) == layout.tune / "e.optuna.db"


@pytest.mark.parametrize("flag", list(COUNT_BOUNDS))
def test_every_count_is_bounded_with_what_it_would_cost(tmp_path: Path, flag: str) -> None:
    """Every count a search takes: its bound is taken; one past it, or 2**32 - 1 (the
    case that grew a worker by half a gigabyte a second), is one line naming the flag,
    the bound, what each unit holds and the memory the count would take at least."""
    bound, each = COUNT_BOUNDS[flag]
    name = f"--{flag.replace('_', '-')}"
    search = ["--space", "margin_sweep", "--runs-dir", str(tmp_path), "--experiment", "e"]
    taken = SearchSettings.from_argv([*search, name, str(bound)])
    assert getattr(taken, flag) == bound
    for value, memory in ((bound + 1, r"[\d.]+ (bytes|KiB|MiB)"), (2**32 - 1, r"32\.0 GiB")):
        with pytest.raises(SearchError) as refused:
            SearchSettings.from_argv([*search, name, str(value)])
        line = str(refused.value)
        assert line.startswith(f"{name}: got {value:,}, expected at most {bound:,}"), line
        assert each in line and re.search(rf"more than {memory} ", line), line


def test_a_resume_bounds_its_number_of_trials(tmp_path: Path) -> None:
    bound = COUNT_BOUNDS["num_samples"][0]
    runs = ["--runs-dir", str(tmp_path), "--experiment", "e"]
    SearchSettings.from_argv(["--space", "margin_sweep", *runs]).save_record(num_samples=2)
    resumed = SearchSettings.from_argv([*runs, "--resume", "--num-samples", str(bound)])
    assert resumed.num_samples == bound
    with pytest.raises(SearchError, match=rf"--num-samples: got {bound + 1:,}, expected at most"):
        SearchSettings.from_argv([*runs, "--resume", "--num-samples", str(bound + 1)])
