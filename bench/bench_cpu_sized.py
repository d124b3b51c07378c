"""The CPU-sized char model against the learning rate, on the embedded world.

    python bench/bench_cpu_sized.py --lr-max 0.001,0.004,0.008,0.016,0.032 --epochs 4
    python bench/bench_cpu_sized.py --lr-max 0.016 --hidden-size 64 --margin 0.1

Trains the paper's char model with the settings a search uses on a CPU
(``gridsearch.settings.CPU_SIZED``: n = 32, batch 64, 1-epoch cycles, a snapshot every
epoch), once per ``--lr-max``, and prints each run's dev curve (R@10 mean and semantic
score per epoch) and its snapshot ensemble on test (R@10 mean, semantic, and the
semantic score's two parts, STS12-16 and SICK-R), beside the store's cached baselines.
Seconds are comparable only on a quiet machine (the load average is printed).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import _common  # noqa: F401  (the repository on sys.path)

from gridsearch.settings import CPU_SIZED
from storage.build import build_synthetic
from trainables import names
from trainables.baselines import store_baselines
from trainables.config import TrainConfig
from trainables.data import TrainingData, default_senteval
from trainables.loop import Trainer
from trainables.semantic import make_semantic

WORLD_IMAGES = 2000  # the default search's embedded world
TEST, ENSEMBLE = names.TEST, names.ENSEMBLE


def _run(config: TrainConfig, data: TrainingData, senteval: str | None) -> None:
    started = time.perf_counter()
    curve = []
    last: dict[str, float] = {}
    for last in Trainer(config, data, make_semantic(senteval, config)).run():
        curve.append(f"{last[names.PRIMARY_RETRIEVAL]:.1f}/{last[names.PRIMARY_SEMANTIC]:.3f}")
    parts = " ".join(
        f"{k} {last.get(names.key(ENSEMBLE, k), float('nan')):.3f}"
        for k in ("sts12_16_pearson", "sickr_pearson")
    )
    print(
        f"lr_max {config.lr_max:<7g} n {config.hidden_size:<4d} margin {config.margin:<5g} "
        f"ensemble test R@10 mean {last[names.FINISHED]:5.1f} semantic "
        f"{last.get(names.key(ENSEMBLE, 'semantic'), float('nan')):.3f} ({parts})  "
        f"{time.perf_counter() - started:5.0f} s\n  dev R@10 mean/semantic by epoch: "
        + "  ".join(curve),
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lr-max", default=str(CPU_SIZED["lr_max"]), help="comma-separated")
    p.add_argument("--epochs", type=int, default=int(CPU_SIZED["epochs"]))
    p.add_argument("--hidden-size", type=int, default=int(CPU_SIZED["hidden_size"]))
    p.add_argument("--margin", type=float, default=TrainConfig.margin)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--store", type=Path, default=Path("runs/world"), help="the embedded world")
    args = p.parse_args(argv)
    if not (args.store / "manifest.json").exists():
        build_synthetic(args.store, images=WORLD_IMAGES)
    data = TrainingData.from_store(str(args.store))
    senteval = default_senteval(str(args.store))
    table, _ = store_baselines(str(args.store), senteval, data)
    print(f"load average at start {os.getloadavg()[0]:.2f}; baselines (test R@10 mean, semantic): "
          + "; ".join(f"{name} {m.get(names.key(TEST, 'r10_mean'), float('nan')):.1f}, "
                      f"{m.get(names.key(TEST, 'semantic'), float('nan')):.3f}"
                      for name, m in table.items()))  # fmt: skip
    for lr_max in (float(v) for v in args.lr_max.split(",")):
        sized = {**CPU_SIZED, "epochs": args.epochs, "semantic_every": args.epochs}
        config = TrainConfig.from_dict({
            **sized, "lr_max": lr_max, "hidden_size": args.hidden_size, "margin": args.margin,
            "threads": args.threads, "seed": args.seed, "device": "cpu",
        })  # fmt: skip
        _run(config, data, senteval)
    print(f"load average at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
