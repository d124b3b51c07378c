"""The CPU-sized char model against the learning rate, on the embedded world.

    python bench/bench_cpu_sized.py --lr-max 0.001,0.004,0.008,0.016,0.032 --epochs 4
    python bench/bench_cpu_sized.py --lr-max 0.016 --hidden-size 64 --margin 0.1
    python bench/bench_cpu_sized.py --lr-max 0.004,0.016 --epochs 12 --seeds 0,1,2   # trade-off

Trains the paper's char model with the settings a search uses on a CPU
(``gridsearch.settings.CPU_SIZED``: n = 32, batch 64, 1-epoch cycles, a snapshot every
epoch), once per ``--lr-max``, and prints each run's dev curve (R@10 mean and semantic
score per epoch) and its snapshot ensemble on test (R@10 mean, semantic, and the
semantic score's two parts, STS12-16 and SICK-R), beside the store's cached baselines.
With ``--seeds``, each rate is trained once per seed, and a trade-off line per run says
where the dev semantic score peaked and how both dev curves moved from that epoch to the
last: the paper's shape (Fig. 4) is a semantic peak at least two epochs before the last
while retrieval keeps rising.
Seconds are comparable only on a quiet machine (the load average is printed).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

if not __package__:  # run as a file: the repository first on sys.path (see bench/__init__.py)
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench import _common
from bench._cli import BadInput, entry, floats, ints, parser
from gridsearch.settings import CPU_SIZED
from trainables import names
from trainables.baselines import store_baselines
from trainables.config import ConfigError, TrainConfig
from trainables.data import TrainingData, default_senteval
from trainables.loop import Trainer
from trainables.semantic import make_semantic

WORLD_IMAGES = 2000  # the default search's embedded world
TEST, ENSEMBLE = names.TEST, names.ENSEMBLE


def tradeoff(retrieval: list[float], semantic: list[float]) -> str:
    """Where each dev curve peaked (epochs 1 on) and how both moved from the semantic peak to
    the last epoch; "paper shape" when the semantic peak is >= 2 epochs before the last and
    retrieval kept rising after it (its last value the highest since the peak, and above
    the value at the peak)."""
    last = len(semantic) - 1
    peak = max(range(1, last + 1), key=lambda e: semantic[e])
    top = max(range(1, last + 1), key=lambda e: retrieval[e])
    d_sem, d_ret = semantic[last] - semantic[peak], retrieval[last] - retrieval[peak]
    rising = retrieval[last] > retrieval[peak] and retrieval[last] >= max(retrieval[peak:])
    shape = last - peak >= 2 and rising
    return (
        f"semantic peak at epoch {peak} of {last} ({semantic[peak]:.3f}), R@10 mean peak at "
        f"epoch {top} ({retrieval[top]:.1f}); from the semantic peak to the last epoch "
        f"semantic {d_sem:+.3f} ({100 * d_sem / semantic[peak]:+.1f}%), R@10 mean {d_ret:+.1f} "
        f"({100 * d_ret / retrieval[peak]:+.1f}%): "
        + ("paper shape" if shape else "not the paper's shape")
    )


def _run(config: TrainConfig, data: TrainingData, senteval: str | None) -> None:
    started = time.perf_counter()
    curve, retrieval, semantic = [], [], []
    last: dict[str, float] = {}
    for last in Trainer(config, data, make_semantic(senteval, config.evaluation, config.run)).run():
        retrieval.append(last[names.PRIMARY_RETRIEVAL])
        semantic.append(last[names.PRIMARY_SEMANTIC])
        curve.append(f"{retrieval[-1]:.1f}/{semantic[-1]:.3f}")
    parts = " ".join(
        f"{k} {last.get(names.key(ENSEMBLE, k), float('nan')):.3f}"
        for k in ("sts12_16_pearson", "sickr_pearson")
    )
    print(
        f"lr_max {config.lr_max:<7g} n {config.hidden_size:<4d} margin {config.margin:<5g} "
        f"ensemble test R@10 mean {last[names.FINISHED]:5.1f} semantic "
        f"{last.get(names.key(ENSEMBLE, 'semantic'), float('nan')):.3f} ({parts})  "
        f"{time.perf_counter() - started:5.0f} s  seed {config.seed}\n  dev R@10 mean/semantic "
        "by epoch: " + "  ".join(curve),
        flush=True,
    )
    if len(semantic) >= 3:
        print(f"  trade-off: {tradeoff(retrieval, semantic)}", flush=True)


def _configs(args: argparse.Namespace) -> list[TrainConfig]:
    """One training config per --lr-max x --seeds, CPU-sized; a bad value is BadInput."""
    sized = {**CPU_SIZED, "epochs": args.epochs, "semantic_every": args.epochs}
    try:
        return [
            TrainConfig.from_dict(
                {
                    **sized,
                    "lr_max": lr_max,
                    "hidden_size": args.hidden_size,
                    "margin": args.margin,
                    "threads": args.threads,
                    "seed": seed,
                    "device": "cpu",
                }
            )
            for lr_max in args.lr_max
            for seed in args.seeds
        ]
    except ConfigError as e:
        raise BadInput(f"error: the training config: {e}") from None


@entry
def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--lr-max", type=floats, default=str(CPU_SIZED["lr_max"]),
                   help="comma-separated, one run each")  # fmt: skip
    p.add_argument("--epochs", type=int, default=int(CPU_SIZED["epochs"]), help="per run")
    p.add_argument("--hidden-size", type=int, default=int(CPU_SIZED["hidden_size"]), help="n")
    p.add_argument("--margin", type=float, default=TrainConfig.margin, help="the loss's margin")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--seeds", type=ints, default="0", help="comma-separated training seeds")
    p.add_argument("--store", type=Path, default=Path("runs/world"),
                   help=f"the embedded world (built there, {WORLD_IMAGES:,} images, "
                   "if absent)")  # fmt: skip
    args = p.parse_args(argv)
    if args.epochs < 1:
        p.error(f"--epochs: got {args.epochs}, expected at least 1")
    configs = _configs(args)
    if not (args.store / "manifest.json").exists():
        _common.build_world(args.store, WORLD_IMAGES)
    data = _common.load(str(args.store), None)
    senteval = default_senteval(str(args.store))
    table, _ = store_baselines(str(args.store), senteval, data)
    print(f"load average at start {os.getloadavg()[0]:.2f}; baselines (test R@10 mean, semantic): "
          + "; ".join(f"{name} {m.get(names.key(TEST, 'r10_mean'), float('nan')):.1f}, "
                      f"{m.get(names.key(TEST, 'semantic'), float('nan')):.3f}"
                      for name, m in table.items()))  # fmt: skip
    for config in configs:
        _run(config, data, senteval)
    print(f"load average at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
