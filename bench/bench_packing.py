"""Trials per GPU (BENCHMARKS.md): aggregate training captions/s of k trials sharing one
GPU, k = 1, 2, 4, 8, against one trial alone. Goal: >= 4x at batch 32 on an H200.

Ray Tune packs trials onto a GPU with fractional resources; here (no Ray needed) k plain
training processes run at once, each capped at 1/k of the GPU's memory with
``torch.cuda.set_per_process_memory_fraction``, each running ``Trainer.train_batches``
(the training loop's own step) at the paper's setting (n=1024, attention, batch 32).
Every worker loads its data, builds its Trainer and warms up, then waits; the parent
starts them together and the aggregate is all captions trained over the span from the
first start to the last finish. Each worker reports its own peak GPU memory.

    python bench/bench_packing.py                      # k = 1 2 4 8 on the GPU
    python bench/bench_packing.py --device cpu --trials 1 2 --hidden-size 64 --steps 10
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

if not __package__:  # run as a file: the repository first on sys.path (see bench/__init__.py)
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import torch

from bench import _common
from bench._cli import BadInput, entry, parser
from trainables.config import TrainConfig
from trainables.data import epoch_batches
from trainables.loop import Trainer


def worker(args: argparse.Namespace) -> None:
    """One trial: build, warm up, say "ready", wait for a line on stdin, train, report."""
    device = _common.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_per_process_memory_fraction(1 / args.worker_of, device)
    else:
        torch.set_num_threads(max(1, args.threads))
    data = _common.load(args.store, args.images)
    config = TrainConfig(
        hidden_size=args.hidden_size,
        batch_size=args.batch_size,
        device=str(device),
        semantic_every=0,
        seed=args.worker_seed,
    )
    trainer = Trainer(config, data)
    plan = epoch_batches(data.train.num_images, config.batch_size, config.seed, 0)
    trainer.train_batches(plan[:3]).cpu()
    print("ready", flush=True)
    sys.stdin.readline()
    started = time.time()
    trainer.train_batches(plan[3 : 3 + args.steps]).cpu()
    finished = time.time()
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else 0.0
    print(json.dumps({"start": started, "end": finished, "peak_mib": peak}), flush=True)


def run_packed(args: argparse.Namespace, k: int) -> tuple[float, float, float]:
    """Aggregate captions/s, the slowest trial's captions/s and the largest peak MiB."""
    command = [sys.executable, str(Path(__file__).resolve()), "--worker-of", str(k)]
    command += ["--store", args.store, "--device", args.device, "--steps", str(args.steps)]
    command += ["--hidden-size", str(args.hidden_size), "--batch-size", str(args.batch_size)]
    command += ["--threads", str(args.threads), "--images", str(args.images)]
    workers = [
        subprocess.Popen(
            [*command, "--worker-seed", str(seed)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for seed in range(k)
    ]
    for process in workers:
        assert process.stdout is not None
        if process.stdout.readline().strip() != "ready":
            raise BadInput(f"error: a worker failed to start (exit code {process.wait()})")
    for process in workers:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    reports = []
    for process in workers:
        out, _ = process.communicate()
        reports.append(json.loads(out.strip().splitlines()[-1]))
    span = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    captions = args.steps * args.batch_size
    slowest = min(captions / (r["end"] - r["start"]) for r in reports)
    return k * captions / span, slowest, max(r["peak_mib"] for r in reports)


@entry
def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--store", default=None, help="default: the embedded world, built once")
    p.add_argument("--images", type=int, default=6000, help="training images each trial loads")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    p.add_argument("--trials", type=int, nargs="+", default=[1, 2, 4, 8],
                   help="how many trials share the device, one run each")  # fmt: skip
    p.add_argument("--hidden-size", type=int, default=1024, help="the model's n")
    p.add_argument("--batch-size", type=int, default=32, help="captions per step")
    p.add_argument("--steps", type=int, default=200, help="timed steps per trial")
    p.add_argument("--threads", type=int, default=1, help="CPU threads per trial")
    p.add_argument("--worker-of", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--worker-seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if min(args.trials) < 1 or args.steps < 1:
        p.error("--trials and --steps: expected at least 1")
    if args.worker_of:
        worker(args)
        return 0
    # the workers get the resolved name ("cuda" -> "cuda:0"): the memory cap needs an index
    args.device = str(_common.device(args.device))
    args.store = _common.world(args.store, 10_000)
    _common.load(args.store, args.images)  # a store the workers cannot use: one error line, here
    print(
        f"trials per GPU: k at once, n={args.hidden_size}, batch {args.batch_size}, "
        f"{args.steps} timed steps each; {_common.machine(torch.device(args.device))}"
    )
    print("trials  aggregate captions/s  per trial (slowest)  ratio vs k=1  peak MiB per trial")
    alone = None
    for k in args.trials:
        aggregate, slowest, peak = run_packed(args, k)
        alone = alone or aggregate
        print(
            f"{k:>6}  {aggregate:>20.1f}  {slowest:>19.1f}  {aggregate / alone:>12.2f}"
            f"  {peak:>18.0f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
