"""The training benchmarks' shared store handling: a store they cannot use is one
``error:`` line naming it and what was expected, exit status 2, for every script that
loads one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

SCRIPTS = {  # each with the options that make it load the store first
    "bench_eval.py": ["--part", "epoch", "--hidden-size", "16"],
    "bench_training.py": ["--batch-sizes", "32", "--steps", "1", "--hidden-size", "16"],
    "bench_cpu_training.py": ["--ours-only"],
    "bench_packing.py": ["--device", "cpu", "--trials", "1"],
}


def _error_line(script: str, store: str) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *SCRIPTS[script], "--store", store],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-2000:]
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_a_store_too_small_for_the_benchmark_is_one_error_line(
    script: str, small_store: str
) -> None:
    line = _error_line(script, small_store)
    assert small_store in line and "the train split has 96 images" in line


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_a_folder_that_is_not_a_store_is_one_error_line(script: str, tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text("{not json")
    line = _error_line(script, str(tmp_path))
    assert line.startswith("error: --store ") and str(tmp_path) in line


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="checks a machine without a GPU"
)
@pytest.mark.parametrize("script", ["bench_packing.py", "bench_eval.py"])
def test_a_gpu_this_machine_lacks_is_one_error_line(script: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--device", "cuda"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert lines == ["error: --device: 'cuda' requested but no CUDA GPU is available"], lines


def test_the_benchmarks_resolve_a_bare_cuda_to_its_index(monkeypatch) -> None:
    # bench_packing's memory cap (set_per_process_memory_fraction) refuses "cuda" alone
    import torch

    from bench import _common

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert _common.device("cuda") == torch.device("cuda:0")
    assert _common.device("auto") == torch.device("cuda:0")
    assert _common.device("cpu") == torch.device("cpu")
