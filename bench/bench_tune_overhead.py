"""Tune's overhead: a search of N trials against the same N trials run one after another
by the plain training loop, in this run, on the same data and threads.

Goal (BENCHMARKS.md, "Training and evaluation speed"): <= 5% of trial time for trials of >= 30 s.

    python bench/bench_tune_overhead.py [--trials 3] [--epochs 5] [--hidden-size 32]
                                        [--address ADDR]

The search is the real CLI (`python -m gridsearch.run`) in a subprocess: a grid space
file with one margin per trial, FIFO, one trial at a time with every CPU (so it does the
same work as the loop), MLflow in sqlite. Reported:

- trial span: from the first trial's start to the last trial's end, as the search's
  MLflow trial runs record them (start and end times, in milliseconds); this holds
  everything Tune adds per trial (worker start or reuse, data from the object store, a
  checkpoint and a report per epoch, MLflow writes);
- end to end: the whole command, also counting Ray's start, the MLflow set-up and the
  summary, which are paid once per search, not per trial.

The plain loop runs the same trials before and after the search; the mean is the
baseline.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

if not __package__:  # run as a file: the repository first on sys.path (see bench/__init__.py)
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import torch

from bench._cli import BadInput, entry, parser
from bench._common import REPO, machine, world
from trainables.config import TrainConfig
from trainables.data import TrainingData, default_senteval
from trainables.loop import Trainer
from trainables.semantic import make_semantic

MARGINS = (0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5)


def plain(store: str, configs: list[TrainConfig]) -> list[float]:
    data = TrainingData.from_store(store)  # once, as the search's driver does
    senteval = default_senteval(store)
    times = []
    for config in configs:
        started = time.perf_counter()
        for _ in Trainer(
            config, data, make_semantic(senteval, config.evaluation, config.run)
        ).run():
            pass
        times.append(time.perf_counter() - started)
        print(f"  plain loop, margin {config.margin}: {times[-1]:.1f} s", flush=True)
    return times


def search(store: str, args: argparse.Namespace, folder: Path) -> tuple[float, float, str]:
    space = folder / "overhead.yaml"
    margins = ", ".join(str(m) for m in MARGINS[: args.trials])
    space.write_text(
        "name: overhead\n"
        # The plain loop's cycle and snapshots (TrainConfig's), not the CPU-sized ones.
        f"fixed: {{hidden_size: {args.hidden_size}, batch_size: {args.batch_size}, "
        f"cycle_epochs: {TrainConfig.cycle_epochs}, "
        f"snapshot_interval: {TrainConfig.snapshot_interval}}}\n"
        f"params:\n  margin: {{type: categorical, choices: [{margins}]}}\n"
    )
    command = [
        sys.executable, "-m", "gridsearch.run", "--space-file", str(space), "--data", store,
        "--epochs", str(args.epochs), "--scheduler", "fifo", "--max-concurrent", "1",
        "--cpus-per-trial", str(os.cpu_count()), "--no-dashboard",
        "--runs-dir", str(folder / "runs"), "--experiment", "overhead",
        *(["--address", args.address] if args.address else []),
    ]  # fmt: skip
    started = time.perf_counter()
    out = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    total = time.perf_counter() - started
    if out.returncode != 0:
        print(f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}", file=sys.stderr)
        raise BadInput(f"error: the search failed (exit {out.returncode}; its output above)")
    spans = _trial_spans(folder / "runs" / "mlflow.db")
    if len(spans) != args.trials:
        print(out.stdout[-3000:], file=sys.stderr)
        raise BadInput(f"error: expected {args.trials} finished trials, found {len(spans)}")
    return max(end for _, end in spans) - min(start for start, _ in spans), total, out.stdout


def _trial_spans(store: Path) -> list[tuple[float, float]]:
    """(start, end) in seconds of every finished trial run of the search's MLflow store."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store}")
    (experiment,) = client.search_experiments(filter_string="name = 'overhead'")
    runs = client.search_runs(
        [experiment.experiment_id],
        "tags.`search.role` = 'trial' and attributes.status = 'FINISHED'",
    )
    return [(r.info.start_time / 1000, r.info.end_time / 1000) for r in runs]


@entry
def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--trials", type=int, default=3, help="one margin each")
    p.add_argument("--epochs", type=int, default=5, help="per trial")
    p.add_argument("--hidden-size", type=int, default=32, help="the model's n")
    p.add_argument("--batch-size", type=int, default=64, help="captions per step")
    p.add_argument("--images", type=int, default=2000, help="embedded world size")
    p.add_argument("--store", default=None, help="an existing store instead")
    p.add_argument("--address", default=None,
                   help="join this Ray cluster (default: the search starts its own; its "
                   "end to end then leaves Ray's start out)")  # fmt: skip
    args = p.parse_args(argv)
    if not 1 <= args.trials <= len(MARGINS):
        p.error(f"--trials: expected 1 to {len(MARGINS)}")
    store = world(args.store, args.images)
    configs = [
        TrainConfig.from_dict(
            dict(
                margin=margin,
                hidden_size=args.hidden_size,
                batch_size=args.batch_size,
                epochs=args.epochs,
                device="cpu",
                threads=os.cpu_count() or 1,
                seed=0,
            )
        )
        for margin in MARGINS[: args.trials]
    ]
    print(machine(torch.device("cpu")))
    print(f"{args.trials} trials: n={args.hidden_size}, batch {args.batch_size}, "
          f"{args.epochs} epochs, store {store}")  # fmt: skip
    # The loop runs before and after the search, so that a drift in the machine's speed
    # (other work, warm caches) weighs on both sides alike.
    before = sum(plain(store, configs))
    with tempfile.TemporaryDirectory() as folder:
        span, total, _ = search(store, args, Path(folder))
    after = sum(plain(store, configs))
    loop = (before + after) / 2
    print(f"plain loop: {before:.1f} s before the search, {after:.1f} s after; mean {loop:.1f} s")
    print()
    print("| | s | per trial s | vs the plain loop |")
    print("| --- | --- | --- | --- |")
    print(f"| plain loop, one after another | {loop:.1f} | {loop / args.trials:.1f} | 1.000 |")
    print(f"| search, trial span | {span:.1f} | {span / args.trials:.1f} | {span / loop:.3f} |")
    print(f"| search, end to end | {total:.1f} | {total / args.trials:.1f} | {total / loop:.3f} |")
    print(
        f"\nTune's overhead per trial: {100 * (span / loop - 1):+.1f}% of trial time "
        f"(goal <= 5%); fixed cost per search (Ray start, MLflow set-up, summary): "
        f"{total - span:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
