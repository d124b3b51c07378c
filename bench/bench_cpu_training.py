"""Training on the CPU: our Trainer against the authors' own training loop, and against
the machine's matrix-product peak (BENCHMARKS.md, "Training at the CPU's limit").

    python bench/bench_cpu_training.py --authors-repo PATH \\
        [--sizes 256:32,256:128,1024:32,1024:128] [--steps 6] [--repeats 3] [--threads 2] \\
        [--profile N:B] [--compare-directions] [--compare-loops] [--compare-products]
        [--bf16]
    python bench/bench_cpu_training.py --ours-only --threads 1 ...   # ours alone

``PATH`` is a copy of the authors' released code (github.com/DannyMerkx/caption2image: a
work tree, or the git directory ``fetch`` brings, whose ``PyTorch/functions`` is then
extracted to a temporary folder); nothing of it is in this repository. For each size n
and batch B, on the same batches of the embedded world's training split (the first
``--steps`` of an epoch's plan, after one warm-up step), timed alternately, best of
``--repeats``:

- **authors**: their ``flickr_trainer.train_epoch`` (their ``text_rnn_encoder``: a
  bidirectional ``nn.GRU`` over a packed batch, one attention head of 128 hidden units;
  their ``img_encoder``; their ``batch_hinge_loss``; Adam with their cyclic
  ``LambdaLR``; their gradient clipping at the Flickr8k values, as ours clips), fed the
  batches already in their format (character indices, lengths, float64 features): their
  HDF5 reads and string conversion are left out of the time;
- **ours**: ``Trainer.train_batches`` (the code path of every epoch) with the same n,
  batch, margin and clipping.

It prints captions/s of both, their ratio, and ours as a share of the **matmul peak**:
the best of ``torch.mm`` on two 2048 x 2048 float32 matrices at the same threads,
measured in the same run. Useful FLOPs per caption are counted over the packed
characters (padding excluded): per character and direction ``2 G n (E + n)`` for the
recurrence (G = 3 gates for the GRU, E = 20 embedding), ``2 * 2 * 2n * 128`` for the
attention, per caption ``2 * 2048 * 2n`` for the image encoder, and the backward as
twice the forward. ``--profile N:B`` prints the torch profiler's table of our steps at
that size: what the time left goes to.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if not __package__:  # run as a file: the repository first on sys.path (see bench/__init__.py)
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import numpy as np
import torch

from bench import _common
from bench._authors import (
    ATTENTION_HIDDEN,
    EMBED,
    FEATURES,
    AuthorsLoop,
    authors_batches,
    authors_functions,
)
from bench._cli import BadInput, entry, parser
from bench._timing import profile, time_alternately
from trainables import packed_rnn_variant
from trainables.config import TrainConfig
from trainables.data import TrainingData, epoch_batches
from trainables.loop import Trainer


def flops_per_caption(n: int, mean_length: float, gates: int = 3) -> float:
    """Useful FLOPs of one training step per caption (see the module docstring)."""
    per_char = 2 * (2 * gates * n * (EMBED + n)) + 2 * 2 * (2 * n) * ATTENTION_HIDDEN
    per_caption = 2 * FEATURES * 2 * n
    return 3 * (per_char * mean_length + per_caption)


def matmul_peak(repeats: int = 10, size: int = 2048) -> float:
    """The best FLOP/s of ``torch.mm`` on two ``size`` x ``size`` float32 matrices."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    best = math.inf
    for _ in range(repeats):
        started = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best


def compare(
    args: argparse.Namespace, data: TrainingData, functions: Path | None, n: int, batch: int,
    peak: float,
) -> dict[str, float]:  # fmt: skip
    config = TrainConfig(
        hidden_size=n, batch_size=batch, device="cpu", semantic_every=0, threads=args.threads
    )
    plan = epoch_batches(data.train.num_images, batch, config.seed, 0)
    if len(plan) < args.steps + 1:
        raise BadInput(f"error: --steps: {len(plan)} batches of {batch} in an epoch, "
                         f"fewer than --steps + 1 ({args.steps + 1})")  # fmt: skip
    timed = plan[1 : 1 + args.steps]
    ours = Trainer(config, data)
    bf16 = Trainer(dataclasses.replace(config, precision="bf16"), data) if args.bf16 else None
    runs: dict[str, Callable[[], None]] = {"ours": lambda: _ours(ours, timed, None)}
    if functions is not None:
        cycle = 5 * (data.train.num_images // batch) * 4
        authors = AuthorsLoop(functions, n, batch, cycle, config.seed)
        theirs_timed = authors_batches(data.train, timed)
        runs["authors"] = lambda: authors.train(theirs_timed)
    if args.compare_directions:
        runs["ours, one direction after the other"] = lambda: _ours(ours, timed, False)
    if args.compare_loops:
        runs["ours, the per-step loop in Python"] = lambda: _ours(ours, timed, None, "python")
    if args.compare_products:
        runs["ours, every product in ATen's mm"] = lambda: _ours(ours, timed, None, mm=True)
    if bf16 is not None:
        runs["ours, bf16"] = lambda: _ours(bf16, timed, None)
    for run in runs.values():  # warm-up: allocator, threads, the first step's set-up
        run()
    best, _ = time_alternately(runs, torch.device("cpu"), args.repeats)
    mean_length = float(np.mean(data.train.lengths[timed.reshape(-1)]))
    flops = flops_per_caption(n, mean_length)
    rate = {name: args.steps * batch / seconds for name, seconds in best.items()}
    rate.setdefault("authors", math.nan)  # --ours-only
    for name in runs:
        if name == "authors":
            continue
        share = rate[name] * flops / peak
        print(
            f"{n:>5} {batch:>5}  {rate['authors']:>10.1f}  {rate[name]:>10.1f}  "
            f"{rate[name] / rate['authors']:>5.2f}x  {flops / 1e9:>8.3f}  {100 * share:>6.1f}%"
            f"  {name}",
            flush=True,
        )
    if args.profile == f"{n}:{batch}":
        profile(runs["ours"], torch.device("cpu"))
    return {"ratio": rate["ours"] / rate["authors"], "share": rate["ours"] * flops / peak}


def _ours(
    trainer: Trainer,
    plan: np.ndarray,
    side_by_side: bool | None,
    loop: str | None = None,
    mm: bool = False,
) -> None:
    """``trainer``'s steps over ``plan``, its two directions side by side or not, its
    per-step loop ``loop`` (None: the defaults), with ``mm``: no product in oneDNN."""
    knobs: dict[str, Any] = {"side_by_side": side_by_side, "loop": loop}
    if mm:
        knobs["onednn_from"] = None
    with packed_rnn_variant(**knobs):
        trainer.train_batches(plan).cpu()


def _sizes(text: str) -> list[tuple[int, int]]:
    try:
        pairs = [tuple(int(x) for x in item.split(":")) for item in text.split(",")]
    except ValueError:
        pairs = []
    if not pairs or any(len(p) != 2 or min(p) < 2 for p in pairs):
        raise BadInput(f"error: --sizes: got {text!r}, expected N:BATCH[,N:BATCH...] "
                         "with N and BATCH at least 2")  # fmt: skip
    return [(p[0], p[1]) for p in pairs]


@entry
def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--authors-repo", type=Path, default=None,
                   help="the authors' caption2image: a work tree or a git directory")  # fmt: skip
    p.add_argument("--sizes", default="256:32,256:128,1024:32,1024:128", help="N:BATCH,...")
    p.add_argument("--steps", type=int, default=6, help="timed steps per run")
    p.add_argument("--repeats", type=int, default=3, help="best of this many rounds")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--images", type=int, default=1000, help="training images of the world")
    p.add_argument("--store", default=None, help="default: the embedded world, built once")
    p.add_argument("--profile", default="", help="N:BATCH: profile our steps at that size")
    p.add_argument("--compare-directions", action="store_true",
                   help="also ours with the two directions one after the other")  # fmt: skip
    p.add_argument("--compare-loops", action="store_true",
                   help="also ours with the recurrence's per-step loop in Python")  # fmt: skip
    p.add_argument("--compare-products", action="store_true",
                   help="also ours with every recurrent product in ATen's mm, "
                   "none in oneDNN")  # fmt: skip
    p.add_argument("--bf16", action="store_true", help="also ours with precision bf16")
    p.add_argument("--ours-only", action="store_true",
                   help="time ours alone (no --authors-repo needed): two of these side by "
                   "side with --threads 1 are what a 2-trial search's trials get")  # fmt: skip
    args = p.parse_args(argv)
    if min(args.steps, args.repeats, args.threads, args.images) < 1:
        p.error("--steps, --repeats, --threads and --images: expected at least 1")
    sizes = _sizes(args.sizes)
    if args.authors_repo is None and not args.ours_only:
        raise BadInput("error: --authors-repo: missing; give a copy of the authors' "
                         "caption2image, or --ours-only")  # fmt: skip
    torch.set_num_threads(args.threads)
    store = _common.world(args.store, 10_000)
    data = _common.load(store, args.images)
    peak = matmul_peak()
    print(f"{_common.machine(torch.device('cpu'))}; {args.threads} threads; load "
          f"{os.getloadavg()[0]:.2f}; matmul peak {peak / 1e9:.1f} GFLOP/s (torch.mm, "
          f"2048 x 2048 float32); {args.steps} timed steps, best of {args.repeats}")  # fmt: skip
    print("    n batch  authors c/s    ours c/s  ratio  GFLOP/c  of peak")
    warnings.filterwarnings("ignore", category=FutureWarning)  # the authors' torch calls
    with tempfile.TemporaryDirectory(prefix="authors-") as scratch:
        functions = (
            None
            if args.ours_only
            else authors_functions(args.authors_repo.resolve(), Path(scratch))
        )
        results = [compare(args, data, functions, n, b, peak) for n, b in sizes]
    at_1024 = [f"{100 * r['share']:.1f}%" for (n, _), r in zip(sizes, results, strict=True)
               if n == 1024]  # fmt: skip
    print(f"load at the end {os.getloadavg()[0]:.2f}; goal: >= 3x the authors at every "
          f"size (lowest {min(r['ratio'] for r in results):.2f}x), >= 50% of the peak at "
          f"n=1024 ({', '.join(at_1024) or 'not run'})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
