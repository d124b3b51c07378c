"""bench_eval.py's part (c), the test battery off the critical path, at tiny sizes: it
prints the battery's time under both regression engines and both embedding paths, the
four runs and the evaluation's shares, and imports neither Ray, MLflow nor Optuna (it
runs on GPU machines that have none of them)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench import bench_eval
from trainables import embedding


@pytest.mark.slow
def test_the_battery_part_runs_at_tiny_sizes(
    small_store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _battery_args(
        small_store, batch_size=8, semantic_every=1, epochs=3, baseline="run", whole_epochs=8
    )
    before = torch.get_num_threads()
    try:
        figures = bench_eval.offpath(args, torch.device("cpu"))
    finally:
        torch.set_num_threads(before)
    out = capsys.readouterr().out
    assert "(c) the test battery off the critical path: n=8" in out
    assert "scoring with the reference engine (the first path)" in out and "batched" in out
    assert "the battery alone: embedding " in out and " s (packed " in out
    assert "in-place evaluation (dev and test retrieval, dev semantic score): padded" in out
    assert "the first path (battery in place, reference engine, the ensemble embedding" in out
    assert "embedding again in parts only, padded), measured: " in out
    assert "today's path (battery in the background, batched engine, the ensemble reusing" in out
    assert "new path (today's, with the packed CPU embeddings)" in out
    assert "extrapolated to 8 epochs" in out
    assert "the first and today's runs' dev metrics (what selects) identical: True" in out
    assert "today's and the new run report the same metrics at the same epochs: True" in out
    # the packed embeddings differ from the padded ones by reordered float32 sums only
    assert figures["largest_difference"] < 1e-3, figures["largest_difference"]
    assert embedding._packs.__module__ == "trainables.embedding"  # set back after the runs
    for key in ("share_old", "share_today", "share_new", "share_old_whole", "share_new_whole"):
        assert 0 <= figures[key] < 1, (key, figures[key])
    for key in ("old_cpu_s", "today_cpu_s", "new_cpu_s"):  # the evaluation costs CPU time
        assert figures[key] > figures["train_cpu_s"], (key, figures)
    # the two engines score alike on the same seed and shuffles (the printed pairs)
    pairs = out.split("loop / batched: ")[1].splitlines()[0].split()
    assert pairs[1] == pairs[3] and pairs[5] == pairs[7], pairs


@pytest.mark.slow  # 5 s or more in the fast tier (BENCHMARKS.md)
def test_the_parts_baseline_and_the_cpu_sizes(small_store: str, capsys) -> None:
    from gridsearch.settings import CPU_SIZED

    assert bench_eval.CPU_SIZED is CPU_SIZED  # the search's sizes, not a copy
    args = _battery_args(
        small_store,
        batch_size=16,  # the CPU-sized trial's 64 is too many for the tiny world's 96 images
        semantic_every=None,
        epochs=2,
        baseline="parts",
        whole_epochs=None,
    )
    before = torch.get_num_threads()
    try:
        bench_eval.offpath(args, torch.device("cpu"))
    finally:
        torch.set_num_threads(before)
    out = capsys.readouterr().out
    assert "every 4 epoch(s), 2 epochs" in out  # the CPU-sized battery schedule
    assert "embedding again in parts only, padded), from its parts: " in out


def test_the_bench_imports_neither_ray_mlflow_nor_optuna() -> None:
    code = (
        "import sys; from bench import bench_eval; "
        "bad = [m for m in ('ray', 'mlflow', 'optuna') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300, cwd=_REPO)


def test_a_bad_flag_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_eval.main(["--part", "nope"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: ") and "--part" in line


_REPO = Path(__file__).resolve().parents[2]


def _battery_args(store: str, **part: object) -> argparse.Namespace:
    """bench_eval's options for part (c) at tiny sizes on ``store``."""
    return argparse.Namespace(
        store=store, world_images=None, train_images=None, dev_images=None, hidden_size=8, **part
    )
