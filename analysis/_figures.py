"""Drawing only: each function takes what ``analysis._compute`` computed and writes a
PNG. Figures are built with ``matplotlib.figure.Figure`` (no pyplot state, no backend
switching), so drawing in a library or a test leaves the caller's matplotlib alone."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from analysis._compute import ParetoSet, ReferenceLine
from analysis.reference import MARGIN_STABLE_RANGE
from gridsearch.curves import TradeoffCurve

DPI = 100
_EPOCH_ZERO_AT = 0.5  # log(0) does not exist: epoch 0 is drawn here and labelled "0"
# per trial on the overlaid curves (with its colour), so that coinciding curves show
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")
_DASHES: tuple[Literal["-", "--", ":", "-."], ...] = ("-", "--", ":", "-.")
_REFERENCE_STYLES: tuple[Literal["--", ":", "-."], ...] = ("--", ":", "-.")  # baselines


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, bbox_inches="tight")  # the legends below the axes too
    return path


def _legend_below(ax: Axes, **kwargs: Any) -> None:
    """A legend under the axes, outside the plotting area, so it never hides a point."""
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False, fontsize=7, **kwargs)


def _epoch_x(epochs: Sequence[int]) -> list[float]:
    return [max(float(e), _EPOCH_ZERO_AT) for e in epochs]


def _epoch_axis(ax: Axes, last_epoch: int) -> None:
    ax.set_xscale("log")
    ticks = [_EPOCH_ZERO_AT, *(t for t in (1, 2, 4, 8, 16, 32, 64, 128) if t <= max(last_epoch, 1))]
    ax.set_xticks(ticks, ["0" if t == _EPOCH_ZERO_AT else str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("epoch (log scale)")
    ax.grid(alpha=0.3)


def draw_tradeoff_overlay(
    curves: Mapping[str, TradeoffCurve], path: Path, references: Sequence[ReferenceLine] = ()
) -> Path:
    """Every trial's dev R@10 mean (left) and dev semantic score (right) against epoch,
    each trial's best-semantic epoch starred on both (the paper's Fig. 4, overlaid)."""
    fig = Figure(figsize=(12, 4.4))
    retrieval_ax, semantic_ax = fig.subplots(1, 2)
    colours = _colours(len(curves))
    last = max((max(c.epochs) for c in curves.values()), default=1)
    for k, ((trial_id, curve), colour) in enumerate(zip(curves.items(), colours, strict=True)):
        x = _epoch_x(curve.epochs)
        # trials whose curves coincide stay told apart: each its own marker and dashes
        style = {"marker": _MARKERS[k % len(_MARKERS)], "linestyle": _DASHES[k % len(_DASHES)]}
        retrieval_ax.plot(x, curve.retrieval, color=colour, alpha=0.8, label=trial_id,
                          markersize=5, markerfacecolor="none", **style)  # fmt: skip
        semantic_ax.plot(x, curve.semantic, color=colour, alpha=0.8, markersize=5,
                         markerfacecolor="none", **style)  # fmt: skip
        if curve.best_semantic_epoch is not None:
            at = curve.epochs.index(curve.best_semantic_epoch)
            for ax, values in ((retrieval_ax, curve.retrieval), (semantic_ax, curve.semantic)):
                ax.plot(x[at], values[at], "*", color=colour, markersize=12, markeredgecolor="k")
    for ax, label in ((retrieval_ax, "dev R@10 mean (%)"), (semantic_ax, "dev semantic score (r)")):
        _epoch_axis(ax, last)
        ax.set_ylabel(label)
    retrieval_ax.set_title("retrieval (★ = the trial's best-semantic epoch)", fontsize=10)
    semantic_ax.set_title("semantic score", fontsize=10)
    if 0 < len(curves) <= 12:
        _legend_below(retrieval_ax, ncol=4, title="trial", title_fontsize=8)
    _draw_references(retrieval_ax, semantic_ax, references)
    return _save(fig, path)


def _draw_references(
    retrieval_ax: Axes, semantic_ax: Axes, references: Sequence[ReferenceLine]
) -> None:
    """The baselines' dev values as grey horizontal lines across both panels, named in
    the semantic panel's legend (the retrieval panel's names the trials)."""
    handles = []
    for reference, style in zip(references, _REFERENCE_STYLES, strict=False):
        for ax, value in ((retrieval_ax, reference.retrieval), (semantic_ax, reference.semantic)):
            if not math.isnan(value):
                ax.axhline(value, color="0.35", linestyle=style, linewidth=1.2)
        handles.append(
            Line2D([], [], color="0.35", linestyle=style, label=f"baseline: {reference.label}")
        )
    if handles:
        _legend_below(semantic_ax, handles=handles, ncol=3, title="baselines' dev values",
                      title_fontsize=8)  # fmt: skip


def draw_family_overlay(
    curves: Mapping[str, Mapping[str, TradeoffCurve]],
    path: Path,
    references: Sequence[ReferenceLine] = (),
) -> Path:
    """The trade-off curves of every trial, one colour per encoder family (legend: the
    family and its trial count), each family's median over its trials per epoch drawn
    thick: do the families peak, and rise, at different epochs?"""
    fig = Figure(figsize=(12, 4.4))
    retrieval_ax, semantic_ax = fig.subplots(1, 2)
    last = max((max(c.epochs) for fam in curves.values() for c in fam.values()), default=1)
    for (family, trials), colour in zip(curves.items(), _colours(len(curves)), strict=True):
        for curve in trials.values():
            x = _epoch_x(curve.epochs)
            retrieval_ax.plot(x, curve.retrieval, "-", color=colour, alpha=0.35, linewidth=1)
            semantic_ax.plot(x, curve.semantic, "-", color=colour, alpha=0.35, linewidth=1)
        for ax, field in ((retrieval_ax, "retrieval"), (semantic_ax, "semantic")):
            epochs, medians = _family_median(trials.values(), field)
            ax.plot(_epoch_x(epochs), medians, "-o", color=colour, linewidth=2.5,
                    markersize=3, label=f"{family} ({len(trials)})")  # fmt: skip
    for ax, label in ((retrieval_ax, "dev R@10 mean (%)"), (semantic_ax, "dev semantic score (r)")):
        _epoch_axis(ax, last)
        ax.set_ylabel(label)
    retrieval_ax.set_title("retrieval by family (thick: median over its trials)", fontsize=10)
    semantic_ax.set_title("semantic score by family", fontsize=10)
    _legend_below(retrieval_ax, ncol=4, title="family (trials)", title_fontsize=8)
    _draw_references(retrieval_ax, semantic_ax, references)
    return _save(fig, path)


def _family_median(curves: Iterable[TradeoffCurve], field: str) -> tuple[list[int], list[float]]:
    by_epoch: dict[int, list[float]] = {}
    for curve in curves:
        for epoch, value in zip(curve.epochs, getattr(curve, field), strict=True):
            if not math.isnan(value):
                by_epoch.setdefault(epoch, []).append(value)
    epochs = sorted(by_epoch)
    return epochs, [float(np.median(by_epoch[e])) for e in epochs]


def _colours(count: int) -> list[tuple[float, float, float, float]]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if count <= 10 else "viridis"]
    return [cmap(i if count <= 10 else i / max(count - 1, 1)) for i in range(count)]


def draw_sensitivity(rows: pd.DataFrame, param: str, kind: str, path: Path) -> Path:
    """One panel per metric: each trial's value with its 95% interval against ``param``;
    a scatter for a continuous parameter, points grouped by category otherwise. A
    margin search shows the paper's stable range 0.15-0.25 as a band."""
    metrics = list(dict.fromkeys(rows["label"]))
    fig = Figure(figsize=(4.2 * max(len(metrics), 1), 3.6))
    axes = np.atleast_1d(fig.subplots(1, max(len(metrics), 1)))
    categories = _categories(rows["value"].astype(str)) if kind == "categorical" else []
    for ax, label in zip(axes, metrics, strict=False):
        part = rows[rows["label"] == label]
        y = part["estimate"].to_numpy(float)
        low = np.nan_to_num(y - part["ci_low"].to_numpy(float))
        high = np.nan_to_num(part["ci_high"].to_numpy(float) - y)
        if kind == "categorical":
            x = _grouped_x(part["value"].astype(str), categories)
            for position, category in enumerate(categories):
                mean = float(np.mean(y[part["value"].astype(str).to_numpy() == category]))
                ax.hlines(mean, position - 0.3, position + 0.3, color="k", linewidth=2)
            ax.set_xticks(range(len(categories)), categories, rotation=20, fontsize=8)
            ax.set_xlim(-0.6, len(categories) - 0.4)
        else:
            x = part["value"].to_numpy(float)
            if _log_scale(x):
                ax.set_xscale("log")
            if param == "margin":
                ax.axvspan(
                    *MARGIN_STABLE_RANGE,
                    color="tab:green",
                    alpha=0.12,
                    label="paper's stable range",
                )
                _legend_below(ax)
        ax.errorbar(x, y, yerr=[low, high], fmt="o", color="tab:blue", ecolor="0.5", capsize=3)
        ax.set_xlabel(param)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{param}: final metrics with 95% intervals (one point per trial)", fontsize=10)
    return _save(fig, path)


def _categories(values: pd.Series) -> list[str]:
    """The distinct values, in numeric order when they are all numbers (512 < 1024)."""
    distinct = sorted(set(values))
    try:
        return sorted(distinct, key=float)
    except ValueError:
        return distinct


def _grouped_x(values: pd.Series, categories: list[str]) -> np.ndarray:
    """Category position plus a small spread, so the trials of one category stay apart."""
    x = np.empty(len(values))
    for position, category in enumerate(categories):
        where = np.flatnonzero(values.to_numpy() == category)
        spread = np.linspace(-0.2, 0.2, len(where)) if len(where) > 1 else np.zeros(1)
        x[where] = position + spread
    return x


def _log_scale(x: np.ndarray) -> bool:
    finite = x[np.isfinite(x)]
    return bool(len(finite) and finite.min() > 0 and finite.max() / finite.min() >= 100)


def draw_pareto(trials: ParetoSet, epochs: ParetoSet, path: Path) -> Path:
    """Dev retrieval against dev semantic: each trial's best values (left) and every
    (trial, epoch) pair coloured by epoch (right), with the Pareto front drawn through."""
    fig = Figure(figsize=(12, 4.6))
    left, right = fig.subplots(1, 2)
    points = trials.points
    left.scatter(points["retrieval"], points["semantic"], color="0.6", label="trial")
    for row in points.itertuples():
        left.annotate(
            str(row.trial_id),
            (row.retrieval, row.semantic),
            fontsize=7,
            alpha=0.7,
            xytext=(3, 3),
            textcoords="offset points",
        )
    _front_line(left, trials.front)
    left.set_title("over trials (best dev values of each)", fontsize=10)
    pairs = epochs.points
    shown = right.scatter(
        pairs["retrieval"], pairs["semantic"], c=pairs["epoch"], cmap="viridis", s=18
    )
    bar = fig.colorbar(shown, ax=right, label="epoch")
    bar.ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    _front_line(right, epochs.front)
    right.set_title("over (trial, epoch) pairs", fontsize=10)
    for ax, (x_label, y_label) in (
        (left, ("best dev R@10 mean (%)", "best dev semantic (r)")),
        (right, ("dev R@10 mean (%)", "dev semantic (r)")),
    ):
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.grid(alpha=0.3)
        _legend_below(ax, ncol=2)
    return _save(fig, path)


def _front_line(ax: Axes, front: pd.DataFrame) -> None:
    ordered = front.sort_values("retrieval")
    ax.plot(
        ordered["retrieval"],
        ordered["semantic"],
        "o-",
        color="tab:red",
        mfc="none",
        markersize=10,
        label="Pareto front",
    )


def draw_importances(table: pd.DataFrame, path: Path) -> Path:
    """Horizontal bars of each parameter's importance, one panel per objective."""
    objectives = list(dict.fromkeys(table["objective"]))
    fig = Figure(figsize=(5 * len(objectives), 0.5 * table["param"].nunique() + 1.6))
    axes = np.atleast_1d(fig.subplots(1, len(objectives)))
    for ax, objective in zip(axes, objectives, strict=True):
        part = table[table["objective"] == objective].sort_values("importance")
        ax.barh(part["param"], part["importance"], color="tab:purple")
        ax.set_xlim(0, max(1.0, math.ceil(part["importance"].max() * 10) / 10))
        ax.set_xlabel("importance (PED-ANOVA, normalised)")
        ax.set_title(objective, fontsize=10)
    return _save(fig, path)
