"""The sensitivity figures: a searched parameter against the dev values its trials
reached, by family (``analysis._figures``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis import _drawing
from analysis._drawing import colours, legend_below
from analysis.reference import MARGIN_STABLE_RANGE

__all__ = ["draw_sensitivity"]


def draw_sensitivity(rows: pd.DataFrame, param: str, kind: str, path: Path) -> Path:
    """One panel per metric: each trial's value with its 95% interval against ``param``;
    a scatter for a continuous parameter, points grouped by category otherwise. A
    margin search shows the paper's stable range 0.15-0.25 as a band."""
    metrics = list(dict.fromkeys(rows["label"]))
    fig = Figure(figsize=(4.2 * max(len(metrics), 1), 3.6))
    axes = np.atleast_1d(fig.subplots(1, max(len(metrics), 1)))
    categories = _categories(rows["value"].astype(str)) if kind == "categorical" else []
    families: list[Line2D] = []
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
                legend_below(ax)
        families = _points_by_family(ax, part, x, y, (low, high))
        ax.set_xlabel(param)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{param}: final metrics with 95% intervals (one point per trial)", fontsize=10)
    fig.tight_layout()
    if families:  # one legend for every panel, below them all
        fig.legend(handles=families, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                   ncol=min(len(families), 6), frameon=False, fontsize=8,
                   title="family (the families that searched it)", title_fontsize=8)  # fmt: skip
    return _drawing.save(fig, path, tight=False)


def _points_by_family(
    ax: Axes, part: pd.DataFrame, x: np.ndarray, y: np.ndarray, error: tuple[Any, Any]
) -> list[Line2D]:
    """The trials' points with their intervals: one colour per encoder family when the
    points are of several families (returned: the legend's handles), else all alike."""
    families = list(dict.fromkeys(part["family"].astype(str))) if "family" in part else []
    if len(families) < 2 or part["param"].iloc[0] == "family":
        ax.errorbar(x, y, yerr=list(error), fmt="o", color="tab:blue", ecolor="0.5", capsize=3)
        return []
    low, high = error
    of = part["family"].astype(str).to_numpy()
    for family, colour in zip(families, colours(len(families)), strict=True):
        at = of == family
        ax.errorbar(x[at], y[at], yerr=[low[at], high[at]], fmt="o", color=colour,
                    ecolor=colour, alpha=0.85, capsize=3)  # fmt: skip
    return [
        Line2D([], [], marker="o", linestyle="", color=colour, label=family)
        for family, colour in zip(families, colours(len(families)), strict=True)
    ]


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
