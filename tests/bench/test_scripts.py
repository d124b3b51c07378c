"""Every bench script end to end at tiny sizes: its help, its table, its one-line errors.
Each runs as ``python bench/bench_x.py`` (the form the docs cite) and as
``python -m bench.bench_x``; the smoke runs call ``main(argv)`` in this process."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from tests.bench.conftest import BENCH

SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if not p.name.startswith("_"))


def _python(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=BENCH.parent,
    )


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: ")
    return line


def test_the_scripts_are_the_ones_expected() -> None:
    # a new script joins the parametrised tests below by being here
    assert {"bench_strategies.py", "tabular.py", "bench_world_generation.py"} <= set(SCRIPTS)


# Every script run as a file, in one process (one interpreter start instead of one per
# script): each as `python bench/x.py --help` runs it, with bench/ itself first on sys.path
# and no module of the bench package imported yet, so a script that does not put the
# repository first (its opening line) fails to import ``bench``.
AS_FILES = """
import contextlib, io, json, runpy, sys
bench, shown = sys.argv[1], {}
for script in sys.argv[2:]:
    for name in [m for m in sys.modules if m == "bench" or m.startswith("bench.")]:
        del sys.modules[name]
    sys.path[0], sys.argv = bench, [script, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(f"{bench}/{script}", run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except Exception as e:
        code, out = 1, io.StringIO(repr(e))
    shown[script] = [code, out.getvalue()]
print(json.dumps(shown))
"""


@pytest.mark.slow
def test_every_script_shows_its_help_run_as_a_file() -> None:
    done = _python("-c", AS_FILES, str(BENCH), *SCRIPTS)
    assert done.returncode == 0, done.stderr[-2000:]
    shown = json.loads(done.stdout.splitlines()[-1])
    assert sorted(shown) == SCRIPTS
    for script, (code, text) in shown.items():
        assert code == 0, (script, text[-2000:])
        assert text.startswith("usage: ") and "--help" in text, (script, text[:500])


def test_a_script_runs_as_a_module_with_its_errors_on_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    done = _python("-m", "bench.bench_world_generation", "--images", "3")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: --images: expected an integer from 10 to 1000000, got 3"
    ]
    assert not list(tmp_path.iterdir())  # its temporary folder removed, though it failed
    assert _python("-m", "bench.bench_rnn", "--help").returncode == 0


def test_help_shows_the_defaults(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # in this process (that a run as a file prints its help is the AS_FILES test's), at
    # the width a piped run wraps its help to
    from bench import bench_rnn

    monkeypatch.setenv("COLUMNS", "80")
    assert bench_rnn.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "(default: 3)" in out and "seed (default: 0)" in out  # a 0 is a default too
    assert bench_rnn.main(["--repeats"]) == 2


def test_world_generation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench import bench_world_generation

    assert bench_world_generation.main(["--images", "10", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "built 10 images" in out and "of the 120 s goal" in out and "verified" in out


def test_store_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench import bench_store_read

    argv = ["--images", "40", "--shard-size", "16", "--repeats", "1", "--compression", "lz4",
            "--dir", str(tmp_path), "--warm-only"]  # fmt: skip
    assert bench_store_read.main(argv) == 0
    out = capsys.readouterr().out
    assert "[warm] store   lz4 " in out and "ratio vs np.load" in out and "[cold]" not in out
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    assert bench_store_read.main(["--store", str(tmp_path / "nothing")]) == 2
    assert _error_line(capsys).startswith(f"error: --store {tmp_path / 'nothing'}")
    assert not list(temporary.iterdir())  # its temporary folder removed, though it failed


def test_scale(small_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    from bench import bench_scale

    argv = ["--store", small_store, "--device", "cpu", "--hidden-size", "8", "--batch-size",
            "16", "--max-steps", "2", "--evaluate"]  # fmt: skip
    assert bench_scale.main(argv) == 0
    out = capsys.readouterr().out
    assert "EXTRAPOLATED from 2 steps" in out and "dev retrieval (12 images)" in out
    assert "peak RSS" in out


def test_rnn(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from bench import bench_rnn

    argv = ["--cells", "gru", "--hidden-sizes", "8", "--batch-sizes", "4", "--repeats", "1",
            "--loops", "python"]  # fmt: skip
    assert bench_rnn.main(argv) == 0
    out = capsys.readouterr().out
    assert "| cell | n | batch | torch s | python, in turn s | speed-up |" in out
    assert "| gru | 8 | 4 | " in out
    assert bench_rnn.main(["--against", str(tmp_path)]) == 2
    assert "no trainables/_packed_rnn.py in it" in _error_line(capsys)


def test_training(small_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    from bench import bench_training

    argv = ["--store", small_store, "--images", "96", "--device", "cpu", "--hidden-size", "8",
            "--batch-sizes", "16", "--steps", "2", "--repeats", "1"]  # fmt: skip
    assert bench_training.main(argv) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert [r[1] for r in rows if r[:1] == ["16"]] == ["reference", "trainer"]
    assert bench_training.main([*argv[:-4], "--steps", "9", "--batch-sizes", "64"]) == 2
    assert _error_line(capsys).startswith("error: --images: 5 steps per epoch at batch 64")


@pytest.mark.slow
def test_cpu_training(small_store: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from bench import bench_cpu_training

    argv = ["--store", small_store, "--images", "96", "--sizes", "8:16", "--steps", "2",
            "--repeats", "1", "--threads", "1"]  # fmt: skip
    assert bench_cpu_training.main([*argv, "--ours-only"]) == 0
    out = capsys.readouterr().out
    assert "matmul peak" in out and any(line.endswith("  ours") for line in out.splitlines())
    # the authors' code is not in the repository: a folder without it is one error line
    assert bench_cpu_training.main([*argv, "--authors-repo", str(tmp_path)]) == 2
    assert "neither a work tree with PyTorch/functions" in _error_line(capsys)


@pytest.mark.slow
def test_packing(small_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    from bench import bench_packing

    argv = ["--store", small_store, "--images", "96", "--device", "cpu", "--trials", "1",
            "--hidden-size", "8", "--batch-size", "8", "--steps", "2"]  # fmt: skip
    assert bench_packing.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("trials  aggregate captions/s")
    assert out[2].split()[0] == "1" and out[2].split()[3] == "1.00"


@pytest.mark.slow
def test_cpu_sized(small_store: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from bench import bench_cpu_sized

    figure = tmp_path / "fig4.png"
    argv = ["--store", small_store, "--epochs", "1", "--hidden-size", "4", "--threads", "1",
            "--cycle-epochs", "1", "--figure", str(figure)]  # fmt: skip
    assert bench_cpu_sized.main(argv) == 0
    out = capsys.readouterr().out
    assert "baselines (test R@10 mean, semantic)" in out and "ensemble test R@10 mean" in out
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert bench_cpu_sized.main(["--lr-max", "x"]) == 2
    assert "--lr-max: got 'x', expected comma-separated numbers" in _error_line(capsys)
    assert bench_cpu_sized.main(["--epochs", "4", "--cycle-epochs", "3"]) == 2
    assert "--cycle-epochs: got 3, expected a divisor of --epochs" in _error_line(capsys)


@pytest.mark.slow
def test_families(small_store: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from bench import bench_families

    out_file = tmp_path / "families.json"
    argv = ["--store", small_store, "--families", "word_bow", "--epochs", "1", "--threads",
            "1", "--out", str(out_file)]  # fmt: skip
    assert bench_families.main(argv) == 0
    assert capsys.readouterr().out.splitlines()[-2].startswith("word_bow ")
    [result] = json.loads(out_file.read_text())["results"]
    assert result["family"] == "word_bow" and result["unknown_words"] is not None
    assert bench_families.main(["--families", "nope"]) == 2
    assert _error_line(capsys).startswith("error: --families: unknown nope;")


@pytest.mark.slow
def test_tune_overhead(
    small_store: str, capsys: pytest.CaptureFixture[str], on_cluster: list[str]
) -> None:
    from bench import bench_tune_overhead

    argv = ["--store", small_store, "--trials", "1", "--epochs", "1", "--hidden-size", "8",
            "--batch-size", "16", *on_cluster]  # fmt: skip
    assert bench_tune_overhead.main(argv) == 0
    out = capsys.readouterr().out
    assert "| search, trial span |" in out and "Tune's overhead per trial:" in out


def test_strategies_checks_its_flags_before_starting_ray(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bench import bench_strategies

    table = str(BENCH / "recorded" / "lr_batch")
    assert bench_strategies.main(["--table", table, "--strategies", "ours,nope"]) == 2
    assert "--strategies: unknown 'nope' for --objective retrieval" in _error_line(capsys)
    assert bench_strategies.main(["--table", table, "--startup", "0"]) == 2
    assert _error_line(capsys).startswith("error: --startup: got 0, expected at least 1")
    assert bench_strategies.main(["--table", table, "--max-concurrent", "0"]) == 2
    assert _error_line(capsys).startswith("error: --max-concurrent: got 0, expected at least 1")
    argv = ["--table", table, "--objective", "semantic", "--strategies", "ours-both"]
    assert bench_strategies.main(argv) == 2  # a two-objective strategy
    assert "--strategies: unknown 'ours-both' for --objective semantic" in _error_line(capsys)


def _asha_ends(reports: list[list], value: int, epochs: int) -> dict[str, int]:
    """The epoch each trial of a one-trial-at-a-time search ends at under Tune's ASHA at
    1-epoch rungs (grace 1, reduction factor 2: a trial stops at a rung when its value,
    ``reports``' column ``value``, is below the median recorded there before it), the
    last trial (which the budget may have cut) left out."""
    rungs: dict[int, list[float]] = {}
    ends: dict[str, int] = {}
    for report in reports:
        ends.setdefault(report[0], epochs)
    trials = list(ends)[:-1]
    for report in reports:
        trial, epoch = report[0], report[1]
        if trial not in trials or epoch < 1 or epoch >= epochs or ends[trial] < epoch:
            continue
        recorded = rungs.setdefault(epoch, [])
        if recorded and report[value] < np.percentile(recorded, 50):
            ends[trial] = epoch
        recorded.append(report[value])
    return {t: ends[t] for t in trials}


# --objective, the strategy searched (semantic: ours with ASHA, whose decisions the test
# checks), and the words of its tables: the dev curve's, the held-out curve's
COMPARED = [
    ("retrieval", "ours", "best dev R@10 mean", "the pick's ensemble test R@10 mean"),
    ("semantic", "ours-asha", "best dev semantic score", "the pick's ensemble test semantic score"),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("objective", "strategy", "found", "held_out"), COMPARED, ids=[c[0] for c in COMPARED]
)
def test_strategies(
    objective: str,
    strategy: str,
    found: str,
    held_out: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    on_cluster: list[str],
) -> None:
    from bench import bench_strategies, tabular
    from gridsearch.settings import OBJECTIVES

    # one trial at a time: the search's trials share one trial process
    results = tmp_path / "results.jsonl"
    table = BENCH / "recorded" / "paper_margin"
    argv = ["--table", str(table), "--strategies", strategy, "--objective", objective,
            "--search-seeds", "1", "--budget", "0.05", "--time-scale", "0",
            "--max-concurrent", "1", "--results", str(results), *on_cluster]  # fmt: skip
    assert bench_strategies.main(argv) == 0
    out = capsys.readouterr().out
    assert f"\n{found} found (% of the grid's), median [IQR]" in out
    assert "| strategy | seeds | 5% | trial-epochs to >= 99%" in out
    assert f"| {strategy} | 1 | " in out
    assert f"held out: {held_out} at unseen training seeds" in out
    # the search's printed best is the objective's best dev value over what it trained
    [saved] = [json.loads(line) for line in results.read_text().splitlines()]
    assert saved["key"]["objective"] == objective
    metric, _ = OBJECTIVES[objective]
    recorded = tabular.RecordedTable.read(table)
    best = max(
        recorded.curve(*saved["configs"][trial], 0).epochs[epoch][metric]
        for trial, epoch, *_ in saved["reports"]
        if epoch >= 1
    )
    [line] = [line for line in out.splitlines() if line.startswith(f"{strategy} seed 0: ")]
    assert f" trial-epochs, best {metric} {best:{bench_strategies.SHOWN[metric]}} (" in line
    if strategy == "ours-asha":  # ASHA stopped trials on the objective's values, not R@10's
        reports, epochs = saved["reports"], recorded.max_epoch
        ran = {t: max(e for u, e, *_ in reports if u == t) for t, *_ in reports}
        ends = _asha_ends(reports, 3, epochs)  # the reports' 4th column: dev semantic best
        assert ends == {t: ran[t] for t in ends}
        assert any(e < epochs for e in ends.values()), "ASHA stopped nothing: no test"
        assert _asha_ends(reports, 2, epochs) != ends, "R@10 would decide the same: no test"
    assert bench_strategies.main(argv) == 0  # the second time read from --results
    assert "1 searches of these settings in" in capsys.readouterr().out


def test_test_tiers_times_a_tier_with_its_counts_and_load(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bench import bench_test_tiers

    argv = ["--tier", "fast", "--", "-n", "0", "tests/test_tolerances.py"]
    assert bench_test_tiers.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(str(BENCH.parent)) and " cores; Python " in out[0]
    assert out[1].startswith("fast: ") and " of the 180 s goal), " in out[1]
    assert " passed, exit 0; load " in out[1] and " before, " in out[1]


def test_trial_path_refuses_a_baseline_that_is_no_revision(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bench import bench_trial_path

    assert bench_trial_path.main(["--baseline", "no-such-revision"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --baseline no-such-revision: not a revision")
