"""Fused trials (BENCHMARKS.md): k trials trained as one fused model against one lone trial.

Training captions/s of k members trained as one model (``trainables.fused``: HFTA's
horizontal fusion) against one lone trial, measured in the same run on the same device.

The lone trial is ``Trainer.train_batches`` (the training loop's own step) at the paper's
setting (n=1024, attention, batch 32); the fused group is ``FusedTrainer.train_batches``
over k members of the same shapes that differ in margin and seed (so each its own batch
stream). Both warm up first, then time ``--steps`` steps; the aggregate counts every
member's captions. Goal (GPU): at least 12x one trial's captions/s at k = 16.

    python bench/bench_fused.py                        # k = 1 2 4 8 16 on the GPU
    python bench/bench_fused.py --device cpu --k 1 2 --hidden-size 32 --steps 3
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

if not __package__:  # run as a file: the repository first on sys.path (see bench/__init__.py)
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import numpy as np
import torch

from bench import _common
from bench._cli import BadInput, entry, parser
from trainables import fuse
from trainables.config import TrainConfig
from trainables.data import TrainingData, epoch_batches
from trainables.loop import Trainer


def member_configs(args: argparse.Namespace, k: int) -> list[TrainConfig]:
    """k members of the same shapes: margins spread over 0.1-0.3, seeds 0..k-1."""
    return [
        TrainConfig(
            hidden_size=args.hidden_size,
            batch_size=args.batch_size,
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


def lone(args: argparse.Namespace, data: TrainingData, device: torch.device) -> float:
    """One trial's captions/s."""
    config = member_configs(args, 1)[0]
    trainer = Trainer(config, data)
    plan = epoch_batches(data.train.num_images, config.batch_size, config.seed, 0)
    trainer.train_batches(plan[: args.warmup]).cpu()
    timed = plan[args.warmup : args.warmup + args.steps]
    seconds = _timed(lambda: trainer.train_batches(timed).cpu(), device)
    return len(timed) * config.batch_size / seconds


def fused(
    args: argparse.Namespace, data: TrainingData, device: torch.device, k: int
) -> tuple[float, float]:
    """k fused members' aggregate captions/s, and the peak GPU memory (MiB; 0 on a CPU)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    trainer = fuse(member_configs(args, k), data)
    plans: np.ndarray = trainer.plans(0)
    trainer.train_batches(plans[:, : args.warmup]).cpu()
    timed = plans[:, args.warmup : args.warmup + args.steps]
    seconds = _timed(lambda: trainer.train_batches(timed).cpu(), device)
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else 0.0
    return k * timed.shape[1] * args.batch_size / seconds, peak


@entry
def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--store", default=None, help="default: the embedded world, built once")
    p.add_argument("--images", type=int, default=1024, help="training images loaded")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--k", type=int, nargs="+", default=[1, 2, 4, 8, 16],
                   help="fused group sizes, one measurement each")  # fmt: skip
    p.add_argument("--hidden-size", type=int, default=1024, help="the model's n")
    p.add_argument("--batch-size", type=int, default=32, help="captions per step and member")
    p.add_argument("--rnn-type", choices=("gru", "lstm"), default="gru", help="the RNN")
    p.add_argument("--pooling", choices=("attention", "max"), default="attention",
                   help="the pooling")  # fmt: skip
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help="autocast")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    args = p.parse_args(argv)
    if min(args.k) < 1 or args.steps < 1 or args.warmup < 0:
        raise BadInput("error: --k and --steps: expected at least 1, --warmup at least 0")
    device = _common.device(args.device)
    args.device = str(device)
    store = _common.world(args.store, 10_000)
    data = _common.load(store, args.images)
    steps = 5 * (data.train.num_images // args.batch_size)
    if args.warmup + args.steps > steps:
        raise BadInput(
            f"error: --warmup + --steps: {args.warmup + args.steps} steps, but an epoch of "
            f"{data.train.num_images} images at batch {args.batch_size} has {steps}"
        )
    print(
        f"fused trials: n={args.hidden_size}, {args.rnn_type}, {args.pooling}, batch "
        f"{args.batch_size} per member, {args.precision}, {args.steps} timed steps; "
        f"{_common.machine(device)}"
    )
    alone = lone(args, data, device)
    print(f"one lone trial (Trainer): {alone:,.1f} captions/s")
    print("     k  aggregate captions/s  per member  ratio vs lone  peak MiB")
    for k in args.k:
        aggregate, peak = fused(args, data, device, k)
        print(f"{k:>6}  {aggregate:>20,.1f}  {aggregate / k:>10,.1f}  {aggregate / alone:>13.2f}"
              f"  {peak:>8.0f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
