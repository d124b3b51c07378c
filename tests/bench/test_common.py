"""The training benchmarks' shared store handling: a store they cannot use is one
``error:`` line naming it and what was expected, exit status 2, for every script that
loads one. Each runs its ``main(argv)`` in this process (running as a file and as a
module is tests/bench/test_scripts.py's); nothing else may reach stderr, nor a warning
that a run as a file would print there."""

from __future__ import annotations

import importlib
import warnings
from pathlib import Path

import pytest
import torch

SCRIPTS = {  # each with the options that make it load the store first
    "bench_eval.py": ["--part", "epoch", "--hidden-size", "16"],
    "bench_training.py": ["--batch-sizes", "32", "--steps", "1", "--hidden-size", "16"],
    "bench_cpu_training.py": ["--ours-only"],
    "bench_packing.py": ["--device", "cpu", "--trials", "1"],
}


def _error_line(capsys: pytest.CaptureFixture[str], script: str, *argv: str) -> str:
    """The one stderr line of ``bench/<script> ARGV``, run as ``main(argv)``, which must
    exit 2 and print nothing else there; torch's thread count is set back after."""
    main = importlib.import_module(f"bench.{script.removesuffix('.py')}").main
    threads = torch.get_num_threads()
    try:
        with warnings.catch_warnings(record=True) as caught:
            # what Python's default filters print on a run's stderr (they hide these four)
            warnings.simplefilter("always")
            for hidden in (DeprecationWarning, PendingDeprecationWarning, ImportWarning,
                           ResourceWarning):  # fmt: skip
                warnings.simplefilter("ignore", hidden)
            code = main(list(argv))
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    assert [str(w.message) for w in caught] == []
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-2000:]
    return lines[0]


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_a_store_too_small_for_the_benchmark_is_one_error_line(
    script: str, small_store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _error_line(capsys, script, *SCRIPTS[script], "--store", small_store)
    assert small_store in line and "the train split has 96 images" in line


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_a_folder_that_is_not_a_store_is_one_error_line(
    script: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "manifest.json").write_text("{not json")
    line = _error_line(capsys, script, *SCRIPTS[script], "--store", str(tmp_path))
    assert line.startswith("error: --store ") and str(tmp_path) in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
@pytest.mark.parametrize("script", ["bench_packing.py", "bench_eval.py"])
def test_a_gpu_this_machine_lacks_is_one_error_line(
    script: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _error_line(capsys, script, "--device", "cuda")
    assert line == "error: --device: 'cuda' requested but no CUDA GPU is available"


def test_the_benchmarks_resolve_a_bare_cuda_to_its_index(monkeypatch) -> None:
    # bench_packing's memory cap (set_per_process_memory_fraction) refuses "cuda" alone
    from bench import _common

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert _common.device("cuda") == torch.device("cuda:0")
    assert _common.device("auto") == torch.device("cuda:0")
    assert _common.device("cpu") == torch.device("cpu")
