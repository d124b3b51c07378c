"""The trade-off curve of one trial (the paper's Fig. 4): dev retrieval and semantic
score against epoch on a log axis. Computing apart from drawing."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "TradeoffCurve",
    "draw_tradeoff",
    "tradeoff_curve",
]


class TradeoffCurve(NamedTuple):
    epochs: list[int]
    retrieval: list[float]  # dev R@10 mean (%) per epoch
    semantic: list[float]  # dev semantic score per epoch (NaN where not evaluated)
    best_semantic_epoch: int | None  # the epoch where the semantic score peaks


def tradeoff_curve(
    history: Mapping[str, Sequence[tuple[int, float]]], retrieval_key: str, semantic_key: str
) -> TradeoffCurve:
    """Align ``(step, value)`` histories of the two metrics by epoch."""
    retrieval = dict(history.get(retrieval_key, ()))
    semantic = dict(history.get(semantic_key, ()))
    epochs = sorted(set(retrieval) | set(semantic))
    sem = [semantic.get(e, math.nan) for e in epochs]
    finite = [(v, e) for e, v in zip(epochs, sem, strict=True) if not math.isnan(v)]
    best = max(finite)[1] if finite else None
    return TradeoffCurve(epochs, [retrieval.get(e, math.nan) for e in epochs], sem, best)


def draw_tradeoff(curve: TradeoffCurve, path: Path, title: str) -> Path:
    """Draw ``curve`` as a PNG: R@10 on the left axis, semantic on the right, epochs on a
    log axis with epoch 0 shown at the left edge (log(0) does not exist)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [max(e, 0.5) for e in curve.epochs]  # epoch 0 drawn at 0.5 and labelled "0"
    fig, left = plt.subplots(figsize=(6, 3.6), dpi=110)
    left.plot(x, curve.retrieval, "o-", color="tab:blue", label="dev R@10 mean")
    left.set_xscale("log")
    left.set_xlabel("epoch (log scale)")
    left.set_ylabel("R@10 mean (%)", color="tab:blue")
    ticks = [t for t in (0.5, 1, 2, 4, 8, 16, 32, 64) if t <= max(x, default=1)]
    left.set_xticks(ticks, ["0" if t == 0.5 else str(int(t)) for t in ticks])
    left.minorticks_off()
    right = left.twinx()
    right.plot(x, curve.semantic, "s--", color="tab:red", label="dev semantic")
    right.set_ylabel("semantic score (r)", color="tab:red")
    if curve.best_semantic_epoch is not None:
        right.axvline(max(curve.best_semantic_epoch, 0.5), color="tab:red", alpha=0.3)
    left.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
