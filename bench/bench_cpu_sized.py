"""The CPU-sized char model against the learning rate, on the embedded world.

    python bench/bench_cpu_sized.py --lr-max 0.001,0.004,0.008,0.016,0.032 --epochs 4
    python bench/bench_cpu_sized.py --lr-max 0.016 --hidden-size 64 --margin 0.1
    python bench/bench_cpu_sized.py --lr-max 0.004,0.016 --epochs 12 --seeds 0,1,2   # trade-off
    python bench/bench_cpu_sized.py --epochs 12 --cycle-epochs 4 --seeds 0,1,2 \
        --figure docs/img/tradeoff-world.png   # the paper's schedule, its Fig. 4 layout

Trains the paper's char model with the settings a search uses on a CPU
(``gridsearch.settings.CPU_SIZED``: n = 32, batch 64, 1-epoch cycles, a snapshot every
epoch), once per ``--lr-max``, and prints each run's dev curve (R@10 mean and semantic
score per epoch) and its snapshot ensemble on test (R@10 mean, semantic, and the
semantic score's two parts, STS12-16 and SICK-R), beside the store's cached baselines.
With ``--seeds``, each rate is trained once per seed, and a trade-off line per run says
where the dev semantic score peaked and how both dev curves moved from that epoch to the
last: the paper's shape (Fig. 4) is a semantic peak at least two epochs before the last
while retrieval keeps rising.
With ``--figure``, every run's dev curves are drawn in the layout of the paper's Fig. 4:
R@10 mean and the semantic score x 100 against the epoch on a log axis (epoch 0 at 0.5).
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


def _run(
    config: TrainConfig, data: TrainingData, senteval: str | None
) -> tuple[list[float], list[float]]:
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
    return retrieval, semantic


def draw_fig4(runs: dict[str, tuple[list[float], list[float]]], path: Path, title: str) -> None:
    """The runs' dev curves in the paper's Fig. 4 layout: R@10 mean (blue) and the semantic
    score x 100 (red) against the epoch, log axis, a line style per run."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.subplots()
    styles = ("-", "--", ":", "-.")
    for k, (label, (retrieval, semantic)) in enumerate(runs.items()):
        x = [max(e, 0.5) for e in range(len(retrieval))]
        style = styles[k % len(styles)]
        ax.plot(x, retrieval, style, color="tab:blue", marker="o", ms=3,
                label=f"dev R@10 mean, {label}")  # fmt: skip
        ax.plot(x, [100 * v for v in semantic], style, color="tab:red", marker="s", ms=3,
                label=f"dev semantic x 100, {label}")  # fmt: skip
    ax.set_xscale("log")
    epochs = len(next(iter(runs.values()))[0])
    ticks = [0.5, *[e for e in (1, 2, 4, 8, 12, 16, 24, 32) if e < epochs]]
    ax.set_xticks(ticks, ["0", *[str(int(t)) for t in ticks[1:]]])
    ax.set_xlabel("epoch (log scale; 0 = untrained)")
    ax.set_ylabel("R@10 mean (%) / Pearson r x 100")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6, ncol=2, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"figure: {path}")


def _configs(args: argparse.Namespace) -> list[TrainConfig]:
    """One training config per --lr-max x --seeds, CPU-sized; a bad value is BadInput."""
    sized = {**CPU_SIZED, "epochs": args.epochs, "semantic_every": args.epochs}
    if args.cycle_epochs:
        sized |= {"cycle_epochs": args.cycle_epochs, "snapshot_interval": args.cycle_epochs}
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
    p.add_argument("--cycle-epochs", type=int, default=0,
                   help="epochs per learning-rate cycle, a snapshot at each cycle's end "
                   "(default: CPU_SIZED's 1; the paper's is 4)")  # fmt: skip
    p.add_argument(
        "--figure",
        type=Path,
        default=None,
        help="draw the dev curves in the paper's Fig. 4 layout into this PNG",
    )
    p.add_argument("--store", type=Path, default=Path("runs/world"),
                   help=f"the embedded world (built there, {WORLD_IMAGES:,} images, "
                   "if absent)")  # fmt: skip
    args = p.parse_args(argv)
    if args.epochs < 1:
        p.error(f"--epochs: got {args.epochs}, expected at least 1")
    if args.cycle_epochs < 0 or (args.cycle_epochs and args.epochs % args.cycle_epochs):
        p.error(f"--cycle-epochs: got {args.cycle_epochs}, expected a divisor of --epochs")
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
    runs = {
        f"lr {config.lr_max:g}, seed {config.seed}": _run(config, data, senteval)
        for config in configs
    }
    print(f"load average at end {os.getloadavg()[0]:.2f}")
    if args.figure is not None:
        cycle = args.cycle_epochs or CPU_SIZED["cycle_epochs"]
        images = sum(split.num_images for split in (data.train, data.val, data.test))
        draw_fig4(runs, args.figure, f"a world of {images:,} images, CPU-sized char model "
                  f"(n = {args.hidden_size}), {cycle}-epoch learning-rate cycles")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
