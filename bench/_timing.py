"""Timing runs against each other: the benchmarks that compare training loops take turns
(best of the rounds) and can print the torch profiler's table of one of them."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

import torch

from bench._common import sync


def time_alternately(
    runs: Mapping[str, Callable[[], object]], device: torch.device, repeats: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Best wall time of each run over ``repeats`` rounds, the runs taking turns; and
    each run's peak CUDA memory (MiB, 0 on the CPU)."""
    best = dict.fromkeys(runs, math.inf)
    peak = dict.fromkeys(runs, 0.0)
    for _ in range(repeats):
        for name, run in runs.items():
            sync(device)
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            started = time.perf_counter()
            run()
            sync(device)
            best[name] = min(best[name], time.perf_counter() - started)
            if device.type == "cuda":
                peak[name] = max(peak[name], torch.cuda.max_memory_allocated(device) / 2**20)
    return best, peak


def profile(run: Callable[[], object], device: torch.device) -> None:
    """The torch profiler's table of ``run``, by self time (what ``--profile`` prints)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        run()
        sync(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=20))
