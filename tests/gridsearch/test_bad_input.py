"""Every class of bad input to ``python -m gridsearch.run`` is one ``error:`` line and exit
status 2, fast, with nothing written: hostile space files, names that are paths, numbers
out of range, unusable tracking URIs, damaged search records. The real CLI entry point,
no Ray started (each fails before it)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from gridsearch.run import main
from gridsearch.settings import SearchError, SearchSettings

SPACE = "name: s\nparams:\n  margin: {type: float, low: 0.1, high: 0.3}\n"


def _fails(
    argv: list[str], capsys: pytest.CaptureFixture[str], runs: Path, within_s: float = 30
) -> str:
    started = time.perf_counter()
    assert main([*argv, "--runs-dir", str(runs)]) == 2
    elapsed = time.perf_counter() - started
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err[:2000]
    assert len(lines[0]) < 600, f"{len(lines[0])} characters"  # an excerpt, never a value
    assert not (runs / "mlflow.db").exists() and not (runs / "tune").exists()
    assert elapsed < within_s, f"{elapsed:.1f} s"
    return lines[0]


def _laughs(depth: int, width: int = 9) -> str:
    lines = ["name: x", 'a0: &a0 ["lol"]']
    for k in range(1, depth):
        lines.append(f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * width)}]")
    lines.append(f"params: {{margin: *a{depth - 1}}}")
    return "\n".join(lines) + "\n"


HOSTILE_YAML = {
    "billion laughs": (_laughs(10), "aliases (*name) are not allowed"),
    "laughs in mappings": (
        "name: x\na: &a {k: 1}\nb: &b {x: *a, y: *a}\nparams: {margin: *b}\n",
        "aliases",
    ),
    "a merge key": (
        "name: x\nbase: &b {type: float, low: 0.1, high: 0.3}\nparams: {margin: {<<: *b}}\n",
        "aliases",
    ),
    "a duplicate top-level key": (SPACE + "name: t\n", "duplicate key 'name'"),
    "a duplicate parameter": (
        "name: s\nparams:\n  margin: {type: float, low: 0.1, high: 0.3}\n"
        "  margin: {type: float, low: 0.2, high: 0.4}\n",
        "duplicate key 'margin'",
    ),
    "a duplicate key in a spec": (
        "name: s\nparams:\n  margin: {type: float, low: 0.1, low: 0.2, high: 0.3}\n",
        "duplicate key 'low'",
    ),
    "deep nesting": ("name: x\nparams: " + "[" * 5000 + "]" * 5000 + "\n", "space.yaml"),
    "a python tag": ("name: !!python/object/apply:os.system ['true']\nparams: {}\n", "YAML"),
    "binary garbage": ("\x00\xff\xfe garbage \x00", "space.yaml"),
    "a huge value": ("name: x\nparams: {margin: {type: '" + "y" * 60000 + "'}}\n", "..."),
}


@pytest.mark.parametrize("case", list(HOSTILE_YAML))
def test_hostile_space_files_are_refused_fast(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, expected = HOSTILE_YAML[case]
    path = tmp_path / "space.yaml"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    # a bound, not a benchmark: refused in ~0.3 s here; the old parser took 30 s and 3 GB
    # on the billion laughs, so 10 s tells the two apart even on a loaded CI machine
    line = _fails(["--space-file", str(path)], capsys, tmp_path / "runs", within_s=10)
    assert expected in line and str(path) in line


def test_space_files_that_are_not_small_regular_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    big = tmp_path / "big.yaml"
    big.write_text(SPACE + "# " + "x" * 70_000 + "\n")
    assert "a space file is at most 65,536 bytes" in _fails(
        ["--space-file", str(big)], capsys, runs
    )
    folder = tmp_path / "dir.yaml"
    folder.mkdir()
    assert "a directory" in _fails(["--space-file", str(folder)], capsys, runs)
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # reading it would block forever
    assert "not a regular file" in _fails(["--space-file", str(fifo)], capsys, runs)
    missing = tmp_path / "missing.yaml"
    assert "cannot be read (No such file" in _fails(["--space-file", str(missing)], capsys, runs)
    toml = tmp_path / "dup.toml"
    toml.write_text('name = "a"\nname = "b"\n')
    assert "not valid TOML" in _fails(["--space-file", str(toml)], capsys, runs)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--experiment", "../../x"], "it names files under --runs-dir"),
        (["--experiment", "/abs/x"], "cannot be a path"),
        (["--experiment", "a/b"], "cannot be a path"),
        (["--experiment", ".hidden"], "not starting with '.'"),
        (["--experiment", ""], "--experiment ''"),
        (["--experiment", "a b"], "--experiment 'a b'"),
        (["--experiment", "x" * 500], "chars)"),
        (["--seed", "-1"], "--seed: got -1, expected an integer from 0"),
        (["--seed", str(2**32)], "--seed: got 4294967296"),
        (["--seed", str(2**64)], "--seed: got 18446744073709551616"),
        (["--time-budget", "-5"], "--time-budget: got -5, expected a number of seconds > 0"),
        (["--time-budget", "0"], "--time-budget: got 0"),
        (["--time-budget", "nan"], "--time-budget: got nan"),
        (["--time-budget", "inf"], "--time-budget: got inf"),
        (["--cpus-per-trial", "-1"], "--cpus-per-trial: got -1, expected a number of CPUs > 0"),
        (["--cpus-per-trial", "0"], "--cpus-per-trial: got 0"),
        (["--gpus-per-trial", "-0.5"], "--gpus-per-trial: got -0.5"),
        (["--gpus-per-trial", "nan"], "--gpus-per-trial: got nan"),
        (["--tracking-wait", "-3"], "--tracking-wait: got -3"),
        (["--min-free-disk", "-1"], "--min-free-disk: got -1"),
        (["--num-samples", "0"], "--num-samples: got 0"),
        (["--epochs", "-2"], "--epochs: got -2"),
        (["--seed", "abc"], "argument --seed: invalid int value: 'abc'"),
        (["--seeds-per-config", "0"], "--seeds-per-config: got 0, expected a positive"),
        (["--seeds-per-config", "-3"], "--seeds-per-config: got -3, expected a positive"),
        (["--seeds-per-config", "2.5"], "argument --seeds-per-config: invalid int value"),
        (["--seeds-per-config", "two"], "argument --seeds-per-config: invalid int value"),
        (
            ["--seed", str(2**32 - 1), "--seeds-per-config", "2"],
            f"expected the seeds it trains at (--seed, --seed + 1, ...) below {2**32}",
        ),
        (["--scheduler", "hyperband"], "argument --scheduler: invalid choice: 'hyperband'"),
        (["--scheduler", ""], "argument --scheduler: invalid choice: ''"),
        (["--sampler", "smac"], "argument --sampler: invalid choice: 'smac'"),
        (["--sampler", "GP"], "argument --sampler: invalid choice: 'GP'"),
        (["--sampler", ""], "argument --sampler: invalid choice: ''"),
        (["--objective", "speed"], "argument --objective: invalid choice"),
        (["--tracking-uri", "bogus://x"], "expected a URI of scheme sqlite"),
        (["--tracking-uri", "mlflow.db"], "expected a URI of scheme"),
        (
            ["--tracking-uri", "sqlite:////no/such/dir/mlflow.db"],
            "the directory /no/such/dir does not",
        ),
        (["--tracking-uri", "sqlite:///relative.db"], "expected sqlite:////absolute/path"),
        (["--tracking-uri", "sqlite://x.db"], "expected sqlite:////absolute/path"),
    ],
)
def test_flags_out_of_range_are_named(
    flags: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _fails(["--space", "margin_sweep", *flags], capsys, tmp_path / "runs")
    assert expected in line
    assert not (tmp_path / "x").exists() and not Path("/abs").exists()


def _record(runs: Path, name: str, text: str) -> None:
    (runs / "searches").mkdir(parents=True, exist_ok=True)
    (runs / "searches" / f"{name}.json").write_text(text)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("not json {", "is not a readable search record (JSONDecodeError"),
        ('{"args": ', "is not a readable search record"),
        ("[1, 2]", "(a JSON list, expected an object)"),
        ('{"space": "margin_sweep"}', "is not a readable search record (field 'space_file': "),
        ('{"args": {"space": 3, "runs_dir": "x"}}', "records the search '3-"),
        ("[" * 100_000 + "]" * 100_000, "is not a readable search record"),
        ("\xff\xfe", "is not a readable search record"),
    ],
)
def test_a_damaged_search_record_is_named(
    content: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    _record(runs, "e", content)
    line = _fails(["--experiment", "e", "--resume"], capsys, runs)
    assert expected in line and "searches/e.json" in line


HOSTILE = (None, True, -1, 0, 1.5, float("nan"), "fortran", "", [], {}, {"root": 1}, 2**70)


def test_every_field_of_a_search_record_is_checked(tmp_path: Path) -> None:
    """A search's real record, each field replaced by each hostile value: the resume's
    settings are built (a value its setting takes) or refused in one line naming the
    record and the field, never a traceback, never a value taken silently (a record
    edited to ``"recurrence": "fortran"`` once resumed as if compiled)."""
    runs = tmp_path / "runs"
    settings = SearchSettings.from_argv(
        ["--space", "margin_sweep", "--smoke-test", "--experiment", "e", "--runs-dir", str(runs)]
    )
    path = settings.save_record(num_samples=2)
    record = json.loads(path.read_text())
    resume = ["--experiment", "e", "--resume", "--runs-dir", str(runs)]
    taken: dict[str, list[object]] = {}
    for field in [*record, "unknown_field"]:
        for value in HOSTILE:
            path.write_text(json.dumps({**record, field: value}))
            try:
                SearchSettings.from_argv(resume)
            except SearchError as err:
                message = str(err)
                assert "\n" not in message and len(message) < 600, message
                assert message.startswith(f"--resume: {path} "), (field, value, message)
                if "is not a readable search record" in message:
                    assert repr(field) in message, (field, value, message)
                continue
            taken.setdefault(field, []).append(value)
    for field in ("recurrence", "engine", "objective", "scheduler", "sampler", "data_via"):
        assert field not in taken, (field, taken.get(field))  # no choice but its choices
    assert len(taken["started_at"]) == len(HOSTILE)  # when it started: any (else its mtime)
    path.write_text(json.dumps({**record, "recurrence": "fortran"}))
    with pytest.raises(SearchError, match="field 'recurrence': \"fortran\", expected one of"):
        SearchSettings.from_argv(resume)


def test_resume_mistakes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    assert "--resume needs --experiment NAME" in _fails(["--resume"], capsys, runs)
    assert "no search named 'nope'" in _fails(["--resume", "--experiment", "nope"], capsys, runs)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)  # a runs directory that is a loop, then a record that is one
    line = _fails(["--resume", "--experiment", "e"], capsys, loop)
    assert f"--resume: {loop} is a symbolic link loop" in line and "--runs-dir at" in line
    (runs / "searches").mkdir(parents=True)
    (runs / "searches" / "e.json").symlink_to("e.json")
    line = _fails(["--resume", "--experiment", "e"], capsys, runs)
    assert f"{runs / 'searches' / 'e.json'} is a symbolic link loop" in line
    (runs / "searches" / "e.json").unlink()
    assert "cannot be a path" in _fails(["--resume", "--experiment", "../e"], capsys, runs)
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    _fails(["--space-file", str(space), "--experiment", "e", "--data", "nothing"], capsys, runs)
    assert not (runs / "searches" / "e.json").exists()  # a refused search leaves no record
    _record(runs, "e", json.dumps({"args": {"space_file": str(space), "runs_dir": str(runs),
                                            "experiment": "e"}}))  # fmt: skip
    space.unlink()  # the search's space file is gone
    line = _fails(["--resume", "--experiment", "e"], capsys, runs)
    assert "space.yaml: cannot be read (No such file" in line
    _record(runs, "f", json.dumps({"args": {"space": "margin_sweep", "runs_dir": str(runs),
                                            "experiment": "other"}}))  # fmt: skip
    assert "records the search 'other'" in _fails(["--resume", "--experiment", "f"], capsys, runs)


def test_bad_data_writes_no_tracking_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    store = tmp_path / "store"
    store.mkdir()
    (store / "manifest.json").write_text("{}")
    assert "--data" in _fails(["--space", "margin_sweep", "--data", str(store)], capsys, runs)
    assert "--data" in _fails(
        ["--space", "margin_sweep", "--data", str(tmp_path / "no")], capsys, runs
    )


def test_runs_directory_that_is_not_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("")
    line = _fails(["--space", "margin_sweep"], capsys, a_file / "runs")
    # the runs directory's checks name the part of the path in the way
    assert line.startswith(f"error: {a_file} is a regular file, and --runs-dir must be a folder")
    assert line.endswith("move it aside or choose another --runs-dir")
