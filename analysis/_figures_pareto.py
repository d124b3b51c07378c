"""The Pareto figure: every (trial, epoch) on the two dev values, the untrained models
marked, the front drawn (``analysis._figures``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import patheffects
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis import _drawing
from analysis._compute import ParetoSet
from analysis._drawing import legend_below, trial_styles

__all__ = ["draw_pareto"]


def draw_pareto(
    trials: ParetoSet,
    epochs: ParetoSet,
    path: Path,
    labels: Mapping[str, str] | None = None,
) -> Path:
    """Dev retrieval against dev semantic: each trial's best values (left, each point
    labelled by its trial) and every (trial, epoch) pair (right: a trial's epochs joined
    in its colour and marker, the epoch written beside each point), with the Pareto front
    drawn through. ``labels``: what each trial tried, in the legend (trial id -> text;
    their order fixes the colours, as the trade-off overlay's)."""
    labels = dict(labels or {})
    fig = Figure(figsize=(12, 4.6))
    left, right = fig.subplots(1, 2)
    points = trials.points
    left.scatter(points["retrieval"], points["semantic"], color="0.6", label="trial")
    for row in points.itertuples():
        text = labels.get(str(row.trial_id), str(row.trial_id))
        left.annotate(text, (row.retrieval, row.semantic), fontsize=7, alpha=0.8,
                      xytext=(3, 3), textcoords="offset points")  # fmt: skip
    _front_line(left, trials.front)
    left.set_title("over trials (best dev values of each)", fontsize=10)
    pairs = epochs.points
    trained = pairs[pairs["epoch"] > 0]
    order = [*labels, *(t for t in dict.fromkeys(pairs["trial_id"].astype(str)) if t not in labels)]
    styles = trial_styles(order, {})
    numbered = len(trained) <= _NUMBERED_UP_TO
    for trial_id, rows in trained.groupby(trained["trial_id"].astype(str), sort=False):
        rows = rows.sort_values("epoch")
        colour, style = styles[trial_id]
        right.plot(rows["retrieval"], rows["semantic"], color=colour, alpha=0.8, markersize=5,
                   linewidth=0.8, label=labels.get(trial_id, trial_id), **style)  # fmt: skip
        if numbered:
            for row in rows.itertuples():
                right.annotate(str(int(row.epoch)), (row.retrieval, row.semantic), fontsize=9,
                               fontweight="bold", color=colour, xytext=(3, 3),
                               textcoords="offset points", path_effects=_HALO)  # fmt: skip
    _front_line(right, epochs.front)
    _limits_of(right, trained)
    _mark_untrained(right, pairs[pairs["epoch"] == 0])
    right.set_title(
        "over (trial, epoch) pairs" + (": the number is the epoch" if numbered else ""),
        fontsize=10,
    )
    for ax, (x_label, y_label) in (
        (left, ("best dev R@10 mean (%)", "best dev semantic (r)")),
        (right, ("dev R@10 mean (%)", "dev semantic (r)")),
    ):
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.grid(alpha=0.3)
    legend_below(left, ncol=2)
    widest = max((len(labels.get(t, t)) for t in order), default=10)
    legend_below(right, ncol=max(1, min(3, 90 // (widest + 6))))
    return _drawing.save(fig, path)


_NUMBERED_UP_TO = 60  # (trial, epoch) points written with their epoch; more would be a blur
# a white edge around a point's number, so that it reads over the grid and the lines
_HALO = [patheffects.withStroke(linewidth=2.5, foreground="white")]


def _limits_of(ax: Axes, points: pd.DataFrame) -> None:
    """Axis limits that fit ``points`` (the trained models) with a margin, so that the
    untrained model at epoch 0, often far below them, does not squash them together."""
    for column, setter in (("retrieval", ax.set_xlim), ("semantic", ax.set_ylim)):
        values = points[column].astype(float)
        values = values[np.isfinite(values)]
        if values.empty:
            continue
        low, high = float(values.min()), float(values.max())
        pad = 0.08 * (high - low) or 0.05 * max(abs(high), 1e-3)
        setter(low - pad, high + pad)


def _mark_untrained(ax: Axes, untrained: pd.DataFrame) -> None:
    """Epoch 0 (the untrained model of each trial) as grey crosses where it falls inside
    the axes; the legend says how many fall outside them."""
    if untrained.empty:
        return
    (x_low, x_high), (y_low, y_high) = ax.get_xlim(), ax.get_ylim()
    inside = untrained["retrieval"].between(x_low, x_high) & untrained["semantic"].between(
        y_low, y_high
    )
    outside = int((~inside).sum())
    label = "epoch 0, untrained" + (
        f" ({outside} of {len(untrained)} off these axes)" if outside else ""
    )
    ax.scatter(untrained.loc[inside, "retrieval"], untrained.loc[inside, "semantic"], marker="x",
               color="0.5", s=22, label=label)  # fmt: skip
    ax.set_xlim(x_low, x_high)
    ax.set_ylim(y_low, y_high)


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
