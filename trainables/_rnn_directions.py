"""The two directions of the packed recurrence (``trainables._packed_rnn``) side by side:
one on the calling thread, the other on a helper thread, each with half of torch's
threads, so that two independent recurrences do not wait for each other's small matrix
products. What a thread's torch and OpenMP settings need for that is said where it is
done (``_start_team``, ``_on_helper``).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

__all__ = ["both"]

_pool: ThreadPoolExecutor | None = None


def both(work: Callable[[int], Any], side_by_side: bool) -> list[Any]:
    """``[work(0), work(1)]`` (the two directions): one after the other with every
    thread of torch's, or side by side, the second on a helper thread, each with half of
    them (one core each on 2 cores: two independent recurrences do not wait for each
    other's small matrix products)."""
    if not side_by_side:
        return [work(0), work(1)]
    helper = _helper()
    threads = torch.get_num_threads()
    half = max(1, threads // 2)
    torch.set_num_threads(half)
    try:
        other = helper.submit(_on_helper, work, 1, half)
        first = work(0)
        return [first, other.result()]
    finally:
        torch.set_num_threads(threads)


def _helper() -> ThreadPoolExecutor:
    """The helper thread, started once with an OpenMP team of its own (``_start_team``)."""
    global _pool
    if _pool is None:
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="packed-rnn")
        pool.submit(_start_team).result()
        _pool = pool
    return _pool


def _start_team() -> None:
    """Make the helper thread the master of a team of 2 OpenMP threads, once: one
    elementwise pass over 2**20 elements (torch splits one from 2 x 32,768). The team's
    worker then idles for good, but it counts among the process's OpenMP threads, and
    when those outnumber the CPUs, libgomp's idle threads spin 100 times before they
    sleep instead of 300,000 (GOMP_SPINCOUNT in libgomp's manual). On 2 cores the helper
    runs its direction on 1 thread, so it has no team of its own; without this one the
    main thread's idle OpenMP worker spun at the start of every side-by-side pass on the
    core the helper needed (its CPU time tripled), and the layer's forward and backward
    at n=256, batch 32, took 1.4 to 4 times as long. The helper's thread count for its
    work is set by each task (``_on_helper``)."""
    torch.set_num_threads(2)
    torch.empty(1 << 20, dtype=torch.float32).fill_(0.0)


def _on_helper(work: Callable[[int], Any], direction: int, threads: int) -> Any:
    """``work(direction)`` on the helper thread with ``threads`` threads and grad mode
    off: both are per thread, so the main thread's settings do not reach it.

    The thread count is OpenMP's (``omp_set_num_threads``) and MKL's
    (``mkl_set_num_threads_local``), each the calling thread's own. A new thread has
    OpenMP's default, every core, until torch sets it lazily to its global count of the
    moment (``at::internal::lazy_init_num_threads``: the thread's first
    ``torch.get_num_threads()``, or its first ``parallel_for`` over more than 32,768
    elements). Left to that, the helper's first products ran on every core, until its
    first large elementwise op (a backward's ``d_gates.sum(dim=0)``) set it, and a
    product of a long inner dimension (that backward's ``d_all.T @ h_all``) has other
    low bits on 2 threads than on 1 in MKL: a process's first training differed from
    its later ones."""
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    with torch.no_grad():
        return work(direction)
