"""Drawing only: each function takes what ``analysis._compute`` computed and writes a
PNG. Figures are built with ``matplotlib.figure.Figure`` (no pyplot state, no backend
switching), so drawing in a library or a test leaves the caller's matplotlib alone.

One module per figure family: the trade-off curves (``_figures_tradeoff``), the
sensitivity (``_figures_sensitivity``), the Pareto front (``_figures_pareto``) and, here,
the importances; what they share (``save``, the markers, the legend) is
``analysis._drawing``."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis import _drawing
from analysis._figures_pareto import draw_pareto
from analysis._figures_sensitivity import draw_sensitivity
from analysis._figures_tradeoff import (
    draw_family_overlay,
    draw_tradeoff_overlay,
    draw_trial_tradeoff,
)

__all__ = [
    "draw_family_overlay",
    "draw_importances",
    "draw_pareto",
    "draw_sensitivity",
    "draw_tradeoff_overlay",
    "draw_trial_tradeoff",
]


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
    return _drawing.save(fig, path)
