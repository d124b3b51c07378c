"""Fused trials (BENCHMARKS.md): k trials trained as one fused model against one lone trial
and against the authors' own loop.

Training captions/s of k members trained as one model (``trainables.fused``: HFTA's
horizontal fusion) against one lone trial and, with ``--authors-repo``, one trial of the
authors' released loop (``bench/_authors.py``), all measured in the same process on the
same device, for each ``--batch-size``.

The lone trial is ``Trainer.train_batches`` (the training loop's own step) at the paper's
setting (n=1024, attention, batch 32); the fused group is ``FusedTrainer.train_batches``
over k members of the same shapes that differ in margin and seed (so each its own batch
stream); the authors' loop is their ``flickr_trainer.train_epoch`` over the lone trial's
batches in their format. Each warms up first, then times ``--steps`` steps; the aggregate
counts every member's captions. Goals (GPU, n=1024): one trial at least 2x the authors'
at batch 32 and 3x at 128; k = 16 at least 12x one of their trials.

    python bench/bench_fused.py --authors-repo .gpu/caption2image --batch-size 32 128
    python bench/bench_fused.py --device cpu --k 1 2 --hidden-size 32 --steps 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

if not __package__:  # run as a file: the repository first on sys.path (see bench/__init__.py)
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import numpy as np
import torch

from bench import _common
from bench._authors import AuthorsLoop, authors_batches, authors_functions
from bench._cli import BadInput, entry, parser
from trainables import fuse
from trainables.config import TrainConfig
from trainables.data import TrainingData, epoch_batches
from trainables.loop import Trainer


def member_configs(args: argparse.Namespace, batch: int, k: int) -> list[TrainConfig]:
    """k members of the same shapes: margins spread over 0.1-0.3, seeds 0..k-1."""
    return [
        TrainConfig(
            hidden_size=args.hidden_size,
            batch_size=batch,
            rnn_type=args.rnn_type,
            pooling=args.pooling,
            precision=args.precision,
            device=args.device,
            semantic_every=0,
            margin=0.1 + 0.2 * i / max(k - 1, 1),
            seed=i,
        )
        for i in range(k)
    ]


def _timed(step: object, device: torch.device) -> float:
    """Seconds for ``step()`` (its result read back, the device synchronised)."""
    _common.sync(device)
    started = time.perf_counter()
    step()  # type: ignore[operator]
    _common.sync(device)
    return time.perf_counter() - started


def lone(args: argparse.Namespace, data: TrainingData, device: torch.device, batch: int,
         authors: Path | None) -> tuple[float, float]:  # fmt: skip
    """One trial's captions/s, ours and (``authors``: their code's folder) theirs on the
    same batches (NaN without)."""
    config = member_configs(args, batch, 1)[0]
    trainer = Trainer(config, data)
    plan = epoch_batches(data.train.num_images, batch, config.seed, 0)
    trainer.train_batches(plan[: args.warmup]).cpu()
    timed = plan[args.warmup : args.warmup + args.steps]
    ours = len(timed) * batch / _timed(lambda: trainer.train_batches(timed).cpu(), device)
    if authors is None:
        return ours, float("nan")
    cycle = 5 * (data.train.num_images // batch) * 4
    loop = AuthorsLoop(authors, args.hidden_size, batch, cycle, config.seed,
                       cuda=device.type == "cuda")  # fmt: skip
    loop.train(authors_batches(data.train, plan[: max(args.warmup, 1)]))
    theirs = authors_batches(data.train, timed)
    return ours, len(timed) * batch / _timed(lambda: loop.train(theirs), device)


def fused(
    args: argparse.Namespace, data: TrainingData, device: torch.device, batch: int, k: int
) -> tuple[float, float]:
    """k fused members' aggregate captions/s, and the peak GPU memory (MiB; 0 on a CPU)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    trainer = fuse(member_configs(args, batch, k), data)
    plans: np.ndarray = trainer.plans(0)
    trainer.train_batches(plans[:, : args.warmup]).cpu()
    timed = plans[:, args.warmup : args.warmup + args.steps]
    seconds = _timed(lambda: trainer.train_batches(timed).cpu(), device)
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else 0.0
    return k * timed.shape[1] * batch / seconds, peak


def measure(args: argparse.Namespace, data: TrainingData, device: torch.device, batch: int,
            authors: Path | None) -> None:  # fmt: skip
    """One batch size's table: the authors' loop, one lone trial, each fused k."""
    steps = 5 * (data.train.num_images // batch)
    if args.warmup + args.steps > steps:
        raise BadInput(
            f"error: --warmup + --steps: {args.warmup + args.steps} steps, but an epoch of "
            f"{data.train.num_images} images at batch {batch} has {steps}"
        )
    alone, theirs = lone(args, data, device, batch, authors)
    print(f"batch {batch}: the authors' loop {theirs:,.1f} captions/s; one lone trial "
          f"(Trainer) {alone:,.1f} captions/s, {alone / theirs:.2f}x theirs")  # fmt: skip
    print("     k  aggregate captions/s  per member  ratio vs lone  vs authors  peak MiB")
    for k in args.k:
        aggregate, peak = fused(args, data, device, batch, k)
        print(f"{k:>6}  {aggregate:>20,.1f}  {aggregate / k:>10,.1f}  {aggregate / alone:>13.2f}"
              f"  {aggregate / theirs:>10.2f}  {peak:>8.0f}", flush=True)  # fmt: skip


@entry
def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--store", default=None, help="default: the embedded world, built once")
    p.add_argument("--images", type=int, default=1024, help="training images loaded")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--authors-repo", type=Path, default=None,
                   help="the authors' caption2image (a work tree or a git directory): "
                   "their loop timed beside ours")  # fmt: skip
    p.add_argument("--k", type=int, nargs="+", default=[1, 2, 4, 8, 16],
                   help="fused group sizes, one measurement each")  # fmt: skip
    p.add_argument("--hidden-size", type=int, default=1024, help="the model's n")
    p.add_argument("--batch-size", type=int, nargs="+", default=[32],
                   help="captions per step and member, a table each")  # fmt: skip
    p.add_argument("--rnn-type", choices=("gru", "lstm"), default="gru", help="the RNN")
    p.add_argument("--pooling", choices=("attention", "max"), default="attention",
                   help="the pooling")  # fmt: skip
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help="autocast")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    args = p.parse_args(argv)
    if min(args.k) < 1 or args.steps < 1 or args.warmup < 0 or min(args.batch_size) < 2:
        raise BadInput("error: --k and --steps: expected at least 1, --batch-size at least "
                       "2, --warmup at least 0")  # fmt: skip
    if args.authors_repo is not None and (args.rnn_type, args.pooling) != ("gru", "attention"):
        raise BadInput("error: --authors-repo: their character model is a GRU with "
                       "attention (--rnn-type gru --pooling attention)")  # fmt: skip
    device = _common.device(args.device)
    args.device = str(device)
    store = _common.world(args.store, 10_000)
    data = _common.load(store, args.images)
    print(
        f"fused trials: n={args.hidden_size}, {args.rnn_type}, {args.pooling}, "
        f"{args.precision}, {args.steps} timed steps after {args.warmup}; "
        f"{_common.machine(device)}"
    )
    warnings.filterwarnings("ignore", category=FutureWarning)  # the authors' torch calls
    warnings.filterwarnings("ignore", category=UserWarning, module="trainer")
    with tempfile.TemporaryDirectory(prefix="authors-") as scratch:
        authors = (
            None
            if args.authors_repo is None
            else authors_functions(args.authors_repo.resolve(), Path(scratch))
        )
        for batch in args.batch_size:
            measure(args, data, device, batch, authors)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
