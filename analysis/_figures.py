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
from matplotlib import patheffects
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis._compute import ParetoSet, ReferenceLine
from analysis.reference import MARGIN_STABLE_RANGE
from gridsearch.tracking import (
    EPOCH_ZERO_AT,
    AxisRange,
    CurveScale,
    TradeoffCurve,
    curve_scale,
    epoch_axis,
    tradeoff_figure,
    untrained_note,
)

DPI = 100
# per trial on the overlaid curves (with its colour), so that coinciding curves show
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")
_DASHES: tuple[Literal["-", "--", ":", "-."], ...] = ("-", "--", ":", "-.")
# the baselines': dash patterns no trial's line has (long dashes, dash-dot-dot, sparse
# dots), grey and without markers
_REFERENCE_STYLES: tuple[tuple[float, tuple[float, ...]], ...] = (
    (0, (10, 3)),
    (0, (7, 2, 1.5, 2, 1.5, 2)),
    (0, (1, 4)),
)


def _save(fig: Figure, path: Path, *, tight: bool = True) -> Path:
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=DPI, bbox_inches="tight")  # the legends below the axes too
    return path


def _legend_below(ax: Axes, **kwargs: Any) -> None:
    """A legend under the axes, outside the plotting area, so it never hides a point."""
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False, fontsize=7, **kwargs)


def _epoch_x(epochs: Sequence[int]) -> list[float]:
    return [max(float(e), EPOCH_ZERO_AT) for e in epochs]


def draw_tradeoff_overlay(
    curves: Mapping[str, TradeoffCurve],
    path: Path,
    references: Sequence[ReferenceLine] = (),
    labels: Mapping[str, str] | None = None,
    groups: Mapping[str, str] | None = None,
) -> Path:
    """Every trial's dev R@10 mean (left) and dev semantic score (right) against epoch,
    each trial's best-semantic epoch starred on both (the paper's Fig. 4, overlaid), on
    axes that span the trained epochs (``gridsearch.tracking.curve_scale``: epoch 0 on the
    edge when it is off them, its values said), every epoch ticked. The legend below both
    panels names every trial by ``labels`` (what it tried; its id where there is none) and
    the baselines; with ``groups`` (trial -> encoder family) of more than one family, a
    family is a colour and its trials differ by marker."""
    labels = labels or {}
    scale = curve_scale(list(curves.values()))
    fig = Figure(figsize=(12, 4.4))
    retrieval_ax, semantic_ax = fig.subplots(1, 2)
    styles = _trial_styles(list(curves), groups or {})
    panels = tuple(
        (ax, field, _with_references(axis, {r.label: getattr(r, field) for r in references}))
        for ax, field, axis in (
            (retrieval_ax, "retrieval", scale.retrieval),
            (semantic_ax, "semantic", scale.semantic),
        )
    )
    for trial_id, curve in curves.items():
        x = _epoch_x(curve.epochs)
        colour, style = styles[trial_id]
        for ax, field, axis in panels:
            values = [axis.clip(v) for v in getattr(curve, field)]
            ax.plot(x, values, color=colour, alpha=0.8, markersize=5, markerfacecolor="none",
                    label=labels.get(trial_id, trial_id) if ax is retrieval_ax else None,
                    **style)  # fmt: skip
            if curve.best_semantic_epoch is not None:
                at = curve.epochs.index(curve.best_semantic_epoch)
                ax.plot(x[at], values[at], "*", color=colour, markersize=12, markeredgecolor="k")
    far = {
        field: [
            f"{r.label} {getattr(r, field):.3g}"
            for r in references
            if not axis.low <= getattr(r, field) <= axis.high
            and not math.isnan(getattr(r, field))  # NaN: the baseline has none
        ]
        for _, field, axis in panels
    }
    notes = {
        field: f"baselines off the axis: {', '.join(f)}" if f else None for field, f in far.items()
    }
    _frame_panels(panels, scale, notes)
    retrieval_ax.set_title("retrieval (★ = the trial's best-semantic epoch)", fontsize=10)
    semantic_ax.set_title("semantic score", fontsize=10)
    handles, names = retrieval_ax.get_legend_handles_labels()
    baselines = _draw_references(retrieval_ax, semantic_ax, references, legend=False)
    handles += baselines
    names += [str(h.get_label()) for h in baselines]
    fig.tight_layout()
    if handles:  # below both panels (the saved image grows to hold it), never over a curve
        widest = max(len(n) for n in names)
        fig.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                   ncol=max(1, min(4, 150 // (widest + 8))), frameon=False, fontsize=7,
                   title="trials (what each tried) and baselines", title_fontsize=8)  # fmt: skip
    return _save(fig, path, tight=False)


def _frame_panels(
    panels: Sequence[tuple[Axes, str, AxisRange]],
    scale: CurveScale,
    notes: Mapping[str, str | None] | None = None,
) -> None:
    """The two trade-off panels' epoch axis, value range and label; under each, where
    epoch 0 falls off its axis and ``notes`` (by field: the baselines off it)."""
    for (ax, field, axis), (label, what) in zip(
        panels,
        (("dev R@10 mean (%)", "dev R@10 mean"), ("dev semantic score (r)", "dev semantic")),
        strict=True,
    ):
        epoch_axis(ax, scale, [untrained_note(axis, what), (notes or {}).get(field)])
        ax.set_ylim(axis.low, axis.high)
        ax.set_ylabel(label)


def _with_references(axis: AxisRange, values: Mapping[str, float]) -> AxisRange:
    """``axis`` widened to the baselines within one of its widths of it, so that their
    lines show beside the trials'; those further off (chance) would squash the trials'
    differences: they stay off, and are named on the panel."""
    width = axis.high - axis.low
    near = [v for v in values.values() if axis.low - width <= v <= axis.high + width]
    pad = 0.04 * width  # a line off the frame
    low, high = (
        min([axis.low, *(v - pad for v in near)]),
        max([axis.high, *(v + pad for v in near)]),
    )
    off = (
        axis.untrained is not None and not low <= min(axis.untrained) <= max(axis.untrained) <= high
    )
    return AxisRange(low, high, axis.untrained if off else None)


def _trial_styles(
    trials: Sequence[str], groups: Mapping[str, str]
) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Each trial's colour and marker/dashes: one colour per trial, or per group (a
    family) when there are several groups, its trials then told apart by marker."""
    families = list(dict.fromkeys(groups.get(t, "") for t in trials))
    by_group = len(families) > 1
    colours = _colours(len(families) if by_group else len(trials))
    seen: dict[str, int] = {}
    styles = {}
    for k, trial in enumerate(trials):
        group = groups.get(trial, "")
        index = seen[group] = seen.get(group, -1) + 1
        k_style = index if by_group else k
        colour = colours[families.index(group)] if by_group else colours[k]
        # trials whose curves coincide stay told apart: each its own marker and dashes
        styles[trial] = (
            colour,
            {
                "marker": _MARKERS[k_style % len(_MARKERS)],
                "linestyle": _DASHES[k_style % len(_DASHES)],
            },
        )
    return styles


def _draw_references(
    retrieval_ax: Axes,
    semantic_ax: Axes,
    references: Sequence[ReferenceLine],
    *,
    legend: bool = True,
) -> list[Line2D]:
    """The baselines' dev values as grey horizontal lines across both panels, named in
    the semantic panel's legend (``legend``; else the caller places the handles)."""
    handles = []
    for reference, style in zip(references, _REFERENCE_STYLES, strict=False):
        for ax, value in ((retrieval_ax, reference.retrieval), (semantic_ax, reference.semantic)):
            if not math.isnan(value):
                ax.axhline(value, color="0.45", linestyle=style, linewidth=1.6, zorder=1)
        handles.append(
            Line2D([], [], color="0.45", linestyle=style, linewidth=1.6,
                   label=f"baseline: {reference.label}")
        )  # fmt: skip
    if handles and legend:
        _legend_below(semantic_ax, handles=handles, ncol=3, title="baselines' dev values",
                      title_fontsize=8)  # fmt: skip
    return handles


def draw_trial_tradeoff(curve: TradeoffCurve, path: Path, title: str) -> Path:
    """One trial's trade-off (``gridsearch.tracking.tradeoff_figure``, as its MLflow
    run's ``tradeoff.png``), ``title`` (the trial and what it tried) wrapped to lines of
    at most ``TITLE_WIDTH`` characters, so all of it shows."""
    return _save(tradeoff_figure(curve, title), path)


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
    scale = curve_scale([c for family in curves.values() for c in family.values()])
    panels = (
        (retrieval_ax, "retrieval", scale.retrieval),
        (semantic_ax, "semantic", scale.semantic),
    )
    for (family, trials), colour in zip(curves.items(), _colours(len(curves)), strict=True):
        for curve in trials.values():
            for ax, field, axis in panels:
                values = [axis.clip(v) for v in getattr(curve, field)]
                ax.plot(_epoch_x(curve.epochs), values, "-", color=colour, alpha=0.35, linewidth=1)
        for ax, field, axis in panels:
            epochs, medians = _family_median(trials.values(), field)
            ax.plot(_epoch_x(epochs), [axis.clip(v) for v in medians], "-o", color=colour,
                    linewidth=2.5, markersize=3, label=f"{family} ({len(trials)})")  # fmt: skip
    _frame_panels(panels, scale)
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
                _legend_below(ax)
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
    return _save(fig, path, tight=False)


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
    for family, colour in zip(families, _colours(len(families)), strict=True):
        at = of == family
        ax.errorbar(x[at], y[at], yerr=[low[at], high[at]], fmt="o", color=colour,
                    ecolor=colour, alpha=0.85, capsize=3)  # fmt: skip
    return [
        Line2D([], [], marker="o", linestyle="", color=colour, label=family)
        for family, colour in zip(families, _colours(len(families)), strict=True)
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
    styles = _trial_styles(order, {})
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
    _legend_below(left, ncol=2)
    widest = max((len(labels.get(t, t)) for t in order), default=10)
    _legend_below(right, ncol=max(1, min(3, 90 // (widest + 6))))
    return _save(fig, path)


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
