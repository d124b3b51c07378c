"""The trade-off figures: R@10 mean against the semantic score over the epochs, the trials'
curves overlaid (with the baselines' references), one trial's, and each family's median
(``analysis._figures``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis import _drawing
from analysis._compute import ReferenceLine
from analysis._drawing import (
    REFERENCE_STYLES,
    colours,
    epoch_x,
    legend_below,
    trial_styles,
)
from gridsearch.tracking import (
    AxisRange,
    CurveScale,
    TradeoffCurve,
    curve_scale,
    epoch_axis,
    tradeoff_figure,
    untrained_note,
)

__all__ = ["draw_family_overlay", "draw_tradeoff_overlay", "draw_trial_tradeoff"]


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
    styles = trial_styles(list(curves), groups or {})
    panels = tuple(
        (ax, field, _with_references(axis, {r.label: getattr(r, field) for r in references}))
        for ax, field, axis in (
            (retrieval_ax, "retrieval", scale.retrieval),
            (semantic_ax, "semantic", scale.semantic),
        )
    )
    for trial_id, curve in curves.items():
        x = epoch_x(curve.epochs)
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
    return _drawing.save(fig, path, tight=False)


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
    for reference, style in zip(references, REFERENCE_STYLES, strict=False):
        for ax, value in ((retrieval_ax, reference.retrieval), (semantic_ax, reference.semantic)):
            if not math.isnan(value):
                ax.axhline(value, color="0.45", linestyle=style, linewidth=1.6, zorder=1)
        handles.append(
            Line2D([], [], color="0.45", linestyle=style, linewidth=1.6,
                   label=f"baseline: {reference.label}")
        )  # fmt: skip
    if handles and legend:
        legend_below(semantic_ax, handles=handles, ncol=3, title="baselines' dev values",
                      title_fontsize=8)  # fmt: skip
    return handles


def draw_trial_tradeoff(curve: TradeoffCurve, path: Path, title: str) -> Path:
    """One trial's trade-off (``gridsearch.tracking.tradeoff_figure``, as its MLflow
    run's ``tradeoff.png``), ``title`` (the trial and what it tried) wrapped to lines of
    at most ``TITLE_WIDTH`` characters, so all of it shows."""
    return _drawing.save(tradeoff_figure(curve, title), path)


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
    for (family, trials), colour in zip(curves.items(), colours(len(curves)), strict=True):
        for curve in trials.values():
            for ax, field, axis in panels:
                values = [axis.clip(v) for v in getattr(curve, field)]
                ax.plot(epoch_x(curve.epochs), values, "-", color=colour, alpha=0.35, linewidth=1)
        for ax, field, axis in panels:
            epochs, medians = _family_median(trials.values(), field)
            ax.plot(epoch_x(epochs), [axis.clip(v) for v in medians], "-o", color=colour,
                    linewidth=2.5, markersize=3, label=f"{family} ({len(trials)})")  # fmt: skip
    _frame_panels(panels, scale)
    retrieval_ax.set_title("retrieval by family (thick: median over its trials)", fontsize=10)
    semantic_ax.set_title("semantic score by family", fontsize=10)
    legend_below(retrieval_ax, ncol=4, title="family (trials)", title_fontsize=8)
    _draw_references(retrieval_ax, semantic_ax, references)
    return _drawing.save(fig, path)


def _family_median(curves: Iterable[TradeoffCurve], field: str) -> tuple[list[int], list[float]]:
    by_epoch: dict[int, list[float]] = {}
    for curve in curves:
        for epoch, value in zip(curve.epochs, getattr(curve, field), strict=True):
            if not math.isnan(value):
                by_epoch.setdefault(epoch, []).append(value)
    epochs = sorted(by_epoch)
    return epochs, [float(np.median(by_epoch[e])) for e in epochs]
