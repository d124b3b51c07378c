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
    for last in Trainer(config, data, make_semantic(senteval, config)).run():
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lr-max", default=str(CPU_SIZED["lr_max"]), help="comma-separated")
    p.add_argument("--epochs", type=int, default=int(CPU_SIZED["epochs"]))
    p.add_argument("--hidden-size", type=int, default=int(CPU_SIZED["hidden_size"]))
    p.add_argument("--margin", type=float, default=TrainConfig.margin)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seeds", default="0", help="comma-separated training seeds")
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
    runs = [(float(v), int(s)) for v in args.lr_max.split(",") for s in args.seeds.split(",")]
    for lr_max, seed in runs:
        sized = {**CPU_SIZED, "epochs": args.epochs, "semantic_every": args.epochs}
        config = TrainConfig.from_dict({
            **sized, "lr_max": lr_max, "hidden_size": args.hidden_size, "margin": args.margin,
            "threads": args.threads, "seed": seed, "device": "cpu",
        })  # fmt: skip
        _run(config, data, senteval)
    print(f"load average at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
