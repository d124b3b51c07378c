"""The comparison's results: per search seed, a share of the grid's best after each
trial-epoch, summarised as a table (median and interquartile range) and a plot."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from bench import tabular
from bench._strategies.events import Events, finite
from bench.bench_search_efficiency import hypervolume
from gridsearch.settings import OBJECTIVES
from trainables import names

WITHIN = 0.99
SHARES = (0.05, 0.10, 0.15, 0.20, 0.30, 0.40, 0.50)  # budgets, as shares of the grid


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[1], q[2]


def grid_front(table: tabular.RecordedTable, seed: int) -> tuple[tuple[float, float], float]:
    """The reference point (the grid's worst final values) and the grid's hypervolume,
    over every config's final (dev R@10 mean best, dev semantic best) at ``seed``."""
    points = [
        (c.epochs[-1][names.BEST_RETRIEVAL], finite(c.epochs[-1][names.BEST_SEMANTIC]))
        for (_, _, s), c in table.curves.items()
        if s == seed
    ]
    ref = (min(p[0] for p in points) - 1e-9, min(p[1] for p in points) - 1e-9)
    return ref, hypervolume(points, ref)


# A dev objective's counterpart on test data, the held-out value of a pick: its snapshot
# ensemble's test score (reported, never selected on).
HELD_OUT = {
    names.BEST_RETRIEVAL: names.FINISHED,
    names.BEST_SEMANTIC: names.key(names.ENSEMBLE, "semantic"),
}


def percent_curves(
    table: tabular.RecordedTable, runs: list[tuple[int, Events]], objective: str, k: int = 1
) -> list[list[float]]:
    """Per search seed, after each trained trial-epoch: the best of ``objective``'s metric
    found (``gridsearch.settings.OBJECTIVES``) as a % of the grid's best (``both``: the
    hypervolume as a % of the grid's), at the training seed the search replayed (with
    ``k`` seeds per config: the grid's best mean over the ``k`` seeds it replayed)."""
    out = []
    for seed, events in runs:
        train_seed = table.seeds[seed % len(table.seeds)]
        if objective == "both":
            ref, whole = grid_front(table, train_seed)
            out.append([100 * h / whole for h in events.hypervolumes(ref)])
        else:
            metric = _metric(objective)
            seen = table.seed_run(train_seed, k)
            best = max(
                statistics.fmean(table.curve(*cfg, s).epochs[-1][metric] for s in seen)
                for cfg in table.configs()
            )
            out.append([100 * v / best for v in events.curve(metric)])
    return out


def heldout_curves(
    table: tabular.RecordedTable,
    runs: list[tuple[int, Events]],
    objective: str,
    seeds_per_config: int,
) -> list[list[float]]:
    """Per search seed, after each trained trial-epoch: the config it would pick (the best
    of ``objective``'s dev metric so far), valued by its ensemble's test score on that
    objective (``HELD_OUT``: for retrieval ``names.FINISHED``, the test R@10 mean; for
    semantic the test semantic score; the last epoch's) averaged over the training seeds
    the search never saw, as a % of the best config's value there. Empty when the search
    saw every recorded seed."""
    metric = _metric(objective)
    held_out = HELD_OUT[metric]
    out = []
    for seed, events in runs:
        first = table.seeds[seed % len(table.seeds)]
        unseen = [s for s in table.seeds if s not in table.seed_run(first, seeds_per_config)]
        if not unseen:
            return []
        value = {
            cfg: statistics.fmean(table.curve(*cfg, s).epochs[-1][held_out] for s in unseen)
            for cfg in table.configs()
        }
        best = max(value.values())
        out.append([100 * value[pick] / best for pick in events.incumbents(metric)])
    return out


def _metric(objective: str) -> str:
    """The one metric a single-objective search selects on (not ``both``'s two)."""
    metric, _ = OBJECTIVES[objective]
    if not isinstance(metric, str):
        raise ValueError(f"objective {objective!r} has {len(metric)} metrics, not one")
    return metric


def _at(curve: list[float], spent: int) -> float:
    return curve[min(spent, len(curve)) - 1] if curve else 0.0


def report(curves: dict[str, list[list[float]]], grid: int, budget: int, what: str) -> None:
    marks = [s for s in SHARES if s * grid <= budget + 1e-9]
    print(f"\n{what}, median [IQR] over search seeds, after a share of the grid's {grid} "
          "trial-epochs:\n")  # fmt: skip
    print("| strategy | seeds | " + " | ".join(f"{s:.0%}" for s in marks)
          + " | trial-epochs to >= 99%: median [IQR] (% of grid) | reached |")  # fmt: skip
    print("| --- | --- | " + " | ".join("---" for _ in marks) + " | --- | --- |")
    for name, rows in curves.items():
        cells = []
        for share in marks:
            lo, mid, hi = _quartiles([_at(c, int(share * grid)) for c in rows])
            cells.append(f"{mid:.1f} [{lo:.1f}, {hi:.1f}]")
        needed = []
        for curve in rows:
            spent = next((k for k, v in enumerate(curve, 1) if v >= 100 * WITHIN), None)
            needed.append(math.inf if spent is None else spent)
        reached = sum(math.isfinite(n) for n in needed)
        lo, mid, hi = _quartiles(needed)

        def fmt(v: float) -> str:
            return ">budget" if math.isinf(v) else f"{v:.0f}"

        of_grid = "-" if math.isinf(mid) else f"{mid / grid:.1%}"
        print(
            f"| {name} | {len(rows)} | " + " | ".join(cells)
            + f" | {fmt(mid)} [{fmt(lo)}, {fmt(hi)}] ({of_grid}) | {reached}/{len(rows)} |"
        )  # fmt: skip


def plot(
    curves: dict[str, list[list[float]]], grid: int, budget: int, what: str, title: str,
    path: Path,
) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    xs = list(range(1, budget + 1))
    share = [100 * x / grid for x in xs]
    low = 100.0
    for name, rows in curves.items():
        q = [_quartiles([_at(c, x) for c in rows]) for x in xs]
        (line,) = ax.plot(share, [m for _, m, _ in q], label=name)
        ax.fill_between(share, [lo for lo, _, _ in q], [hi for _, _, hi in q], alpha=0.15,
                        color=line.get_color())  # fmt: skip
        low = min(low, q[len(q) // 10][1])
    ax.axhline(100 * WITHIN, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("trial-epochs spent, % of the full grid's")
    ax.set_ylabel(f"{what}, % of the grid's")
    ax.set_ylim(max(0.0, low - 5), 100.5)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(f"{title}: median and interquartile range over search seeds", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")
