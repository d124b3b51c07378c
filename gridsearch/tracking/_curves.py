"""The trade-off curve of one trial (the paper's Fig. 4): dev retrieval and semantic
score against epoch on a log axis. Computing apart from drawing. And the same trade-off
for MLflow's own chart view of a search (``charts_view``).

MLflow 3.17 has no Python API for charts. Its UI builds a chart per metric, in sections
by prefix, alphabetically, on the experiment page (Chart view) and on a run's "Model
metrics" tab alike; the experiment page alone can be opened on a saved view (an
experiment tag ``mlflow.sharedViewState.<key>``, read through the URL parameter
``viewStateShareKey``), whose state may hold the chart cards (``compareRunCharts``) and
their sections (``compareRunSections``): the format of the UI's own Share button, read
from its JavaScript build (mlflow/server/js). A run's page keeps its layout in the
browser only."""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from gridsearch.tracking._tags import ROLE_TAG, ROLE_TRIAL, TRADEOFF_IMAGE

__all__ = [
    "EPOCH_ZERO_AT",
    "TITLE_WIDTH",
    "TRIALS_ONLY",
    "AxisRange",
    "CurveScale",
    "TradeoffCurve",
    "charts_url",
    "charts_view",
    "curve_scale",
    "draw_tradeoff",
    "epoch_axis",
    "epoch_ticks",
    "tradeoff_curve",
    "tradeoff_figure",
    "trajectory_figure",
    "untrained_note",
]

CHARTS_SECTION = "Trade-off (dev), epoch by epoch"
EPOCHS_SECTION = "dev R@10 mean and dev semantic per epoch"
EPOCH_ZERO_AT = 0.5  # log(0) does not exist: on a log axis epoch 0 is drawn here, labelled "0"
TITLE_WIDTH = 60  # characters per line of a trial's figure's title
LABELLED_UP_TO = 8  # epochs labelled one by one; beyond, the powers of two and the last


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


class AxisRange(NamedTuple):
    """One metric's axis: the trained epochs' values (1 and on) with a margin, so that the
    trials' differences fill it; epoch 0, the untrained model near chance, is kept but does
    not set it: where an epoch-0 value falls outside, ``untrained`` holds their span."""

    low: float
    high: float
    untrained: tuple[float, float] | None  # epoch 0's values, min and max, when off the axis

    def clip(self, value: float) -> float:
        """``value`` drawn inside the axis: one off it sits on the nearer edge."""
        return value if value != value else min(max(value, self.low), self.high)


class CurveScale(NamedTuple):
    """The scales of trade-off curves drawn together (``curve_scale``)."""

    ticks: list[int]  # the epochs labelled on the epoch axis
    minor: list[int]  # the other epochs, ticked without a label
    retrieval: AxisRange  # dev R@10 mean (%)
    semantic: AxisRange  # dev semantic score (r)


def epoch_ticks(last: int) -> tuple[list[int], list[int]]:
    """Every epoch up to ``last`` ticked: labelled up to ``LABELLED_UP_TO``, then at the
    powers of two and ``last`` (a log axis crowds the later epochs), the rest unlabelled."""
    labelled = [
        e for e in range(max(last, 0) + 1) if e <= LABELLED_UP_TO or e & (e - 1) == 0 or e == last
    ]
    return labelled, [e for e in range(1, max(last, 0) + 1) if e not in labelled]


def _axis(values: Sequence[tuple[int, float]]) -> AxisRange:
    finite = [(e, v) for e, v in values if not math.isnan(v)]
    trained = [v for e, v in finite if e > 0] or [v for _, v in finite] or [0.0, 1.0]
    low, high = min(trained), max(trained)
    pad = 0.08 * (high - low) or 0.05 * max(abs(high), 1e-3)
    low, high = low - pad, high + pad
    untrained = [v for e, v in finite if e == 0]
    off = [v for v in untrained if not low <= v <= high]
    return AxisRange(low, high, (min(untrained), max(untrained)) if off else None)


def curve_scale(curves: Sequence[TradeoffCurve]) -> CurveScale:
    """The epoch ticks and the two metrics' axes of ``curves`` drawn together."""
    last = max((max(c.epochs) for c in curves if c.epochs), default=1)
    ticks, minor = epoch_ticks(last)
    pairs = {
        field: [(e, v) for c in curves for e, v in zip(c.epochs, getattr(c, field), strict=True)]
        for field in ("retrieval", "semantic")
    }
    return CurveScale(ticks, minor, _axis(pairs["retrieval"]), _axis(pairs["semantic"]))


def draw_tradeoff(curve: TradeoffCurve, path: Path, title: str) -> Path:
    """``tradeoff_figure`` saved as a PNG at ``path``."""
    tradeoff_figure(curve, title).savefig(path, bbox_inches="tight")
    return path


def tradeoff_figure(curve: TradeoffCurve, title: str, scale: CurveScale | None = None) -> Any:
    """One trial's ``curve`` as a matplotlib ``Figure``: dev R@10 mean on the left axis,
    the dev semantic score on the right, against epoch on a log axis (epoch 0 at its left
    edge), every epoch ticked, the axes spanning the trained epochs (``curve_scale``;
    ``scale``: shared with other trials), the best-semantic epoch marked. ``title`` (the
    trial and what it tried) is wrapped to lines of at most ``TITLE_WIDTH`` characters, so
    all of it shows."""
    from matplotlib.figure import Figure  # no pyplot: the caller's matplotlib is left alone

    scale = scale or curve_scale([curve])
    fig = Figure(figsize=(6, 3.6), dpi=110)
    left = fig.subplots()
    right = left.twinx()
    x = [max(float(e), EPOCH_ZERO_AT) for e in curve.epochs]
    notes = []
    for ax, values, axis, style, colour, label in (
        (left, curve.retrieval, scale.retrieval, "o-", "tab:blue", "dev R@10 mean"),
        (right, curve.semantic, scale.semantic, "s--", "tab:red", "dev semantic"),
    ):
        ax.plot(x, [axis.clip(v) for v in values], style, color=colour, label=label)
        ax.set_ylim(axis.low, axis.high)
        notes.append(untrained_note(axis, label))
    epoch_axis(left, scale, notes)
    left.set_ylabel("dev R@10 mean (%)", color="tab:blue")
    right.set_ylabel("dev semantic score (r)", color="tab:red")
    if curve.best_semantic_epoch is not None:
        right.axvline(max(curve.best_semantic_epoch, EPOCH_ZERO_AT), color="tab:red", alpha=0.3)
    wrapped = textwrap.wrap(title, TITLE_WIDTH, break_long_words=True)
    left.set_title("\n".join(wrapped) or title, fontsize=9)
    fig.tight_layout()
    return fig


def trajectory_figure(curve: TradeoffCurve, colour: str) -> Any:
    """One trial's dev semantic score against its dev R@10 mean, epoch by epoch: each
    trained epoch a point numbered by its epoch, an arrow from each to the next (which way
    the trial went, epoch 1 on), the last epoch filled; on axes spanning the trained
    epochs, epoch 0 (the untrained model) named under them when it falls off. ``colour``:
    the trial's, as MLflow draws its run, which names it beside the image. Drawn large
    (MLflow shows a copy of at most 256 pixels). A matplotlib ``Figure``, or None when the
    trial has no trained epoch with both values."""
    from matplotlib.figure import Figure

    points = [
        (e, r, s)
        for e, r, s in zip(curve.epochs, curve.retrieval, curve.semantic, strict=True)
        if e > 0 and not (math.isnan(r) or math.isnan(s))
    ]
    if not points:
        return None
    scale = curve_scale([curve])
    fig = Figure(figsize=(4.8, 3.9), dpi=100)
    ax = fig.subplots()
    x = [scale.retrieval.clip(r) for _, r, _ in points]
    y = [scale.semantic.clip(s) for _, _, s in points]
    ax.plot(x, y, "o", color=colour, markerfacecolor="white", markersize=9, zorder=3)
    ax.plot(x[-1:], y[-1:], "o", color=colour, markersize=9, zorder=4)
    for start, end in zip(zip(x, y, strict=True), zip(x[1:], y[1:], strict=True), strict=False):
        arrow = {"arrowstyle": "-|>,head_length=0.6,head_width=0.35", "color": colour,
                 "shrinkA": 7, "shrinkB": 7, "linewidth": 2}  # fmt: skip
        ax.annotate("", xy=end, xytext=start, zorder=2, arrowprops=arrow)
    for (epoch, _, _), xi, yi in zip(points, x, y, strict=True):
        ax.annotate(str(epoch), (xi, yi), xytext=(6, 5), textcoords="offset points",
                    fontsize=16, fontweight="bold", color="0.1", zorder=5)  # fmt: skip
    ax.set_xlim(scale.retrieval.low, scale.retrieval.high)
    ax.set_ylim(scale.semantic.low, scale.semantic.high)
    ax.tick_params(labelsize=12)
    label = "dev R@10 mean (%)"
    untrained = [
        (r, s) for e, r, s in zip(curve.epochs, curve.retrieval, curve.semantic, strict=True)
        if e == 0
    ]  # fmt: skip
    if untrained and (scale.retrieval.untrained or scale.semantic.untrained):
        label += f"\nepoch 0 off the axes: {untrained[0][0]:.3g}, {untrained[0][1]:.3g}"
    ax.set_xlabel(label, fontsize=13)
    ax.set_ylabel("dev semantic (r)", fontsize=13)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def epoch_axis(ax: Any, scale: CurveScale, notes: Sequence[str | None] = ()) -> None:
    """A log epoch axis, epoch 0 at ``EPOCH_ZERO_AT``, every epoch ticked; ``notes``
    (what is off the value axes: ``untrained_note``) each a line of its label, under the
    axes, where no line of the plot runs through them."""
    ax.set_xscale("log")
    at = [max(float(e), EPOCH_ZERO_AT) for e in scale.ticks]
    ax.set_xticks(at, [str(e) for e in scale.ticks])
    ax.set_xticks([float(e) for e in scale.minor], minor=True)
    ax.set_xticklabels([], minor=True)
    ax.set_xlim(EPOCH_ZERO_AT / 1.25, max(at, default=1.0) * 1.15)
    ax.set_xlabel("\n".join(["epoch (log scale)", *filter(None, notes)]))
    ax.grid(alpha=0.3)


def untrained_note(axis: AxisRange, what: str) -> str | None:
    """Where epoch 0 is off ``axis`` (its points sit on that edge), say so: ``dev R@10
    mean: epoch 0 below the axis, 10.2``; None where it is on it."""
    if axis.untrained is None:
        return None
    low, high = axis.untrained
    below = high < axis.low or (low < axis.low and not high > axis.high)
    values = f"{low:.3g}" if low == high else f"{low:.3g} to {high:.3g}"
    return f"{what}: epoch 0 {'below' if below else 'above'} the axis, {values}"


TRIALS_ONLY = f"tags.`{ROLE_TAG}` = '{ROLE_TRIAL}'"  # the trials' runs, not the search's
CHART_HEIGHT = 520  # pixels: MLflow's default of 360 cut the legend naming the trials
IMAGE_ROW = 300  # pixels of the image card per row of trials' images (three, 1,600 px wide)


def charts_view(
    retrieval_key: str,
    semantic_key: str,
    order_by: str,
    now_ms: int,
    scale: CurveScale | None = None,
    trials: int = 4,
) -> str:
    """The value of the experiment tag that saves the search's chart view (``CHARTS_VIEW``):
    the trials only (not the search's own run), each named by what it tried (its run
    name, in every chart's legend) and drawn in its own colour (``RUN_COLOUR_TAG``). A
    first section shows the trade-off epoch by epoch: each trial's image of
    ``semantic_key`` against ``retrieval_key`` (``TRADEOFF_IMAGE``, its epochs numbered
    and joined by arrows in their order: MLflow's own chart of one metric against another
    joins a run's points in the order of the metric across, not of the epochs), room for
    three rows of them; a second, one large chart per row, each of the two against epoch,
    every trial named in its legend (two rows of it: the charts take the whole width, the
    list of runs beside them hidden); with ``scale`` (the trials' ``curve_scale``, once
    they ran) their axes span the trained epochs, epoch 0 falling off them. The runs are
    sorted by the metric
    ``order_by``, best first, which lists them flat (nested under the search's run they
    are collapsed, and not drawn), every one drawn (the UI draws the first 10 otherwise);
    MLflow's own sections, one per metric prefix, follow."""
    common = {"isGenerated": False, "deleted": False}
    axes = {}
    if scale is not None:
        axes = {retrieval_key: scale.retrieval, semantic_key: scale.semantic}
    image = {
        **common,
        "metricSectionId": "tradeoff",
        "uuid": "tradeoff-epochs",
        "type": "IMAGE",
        "displayName": f"{semantic_key} against {retrieval_key}, epoch by epoch (one image "
        "per trial: the numbers are its epochs, the arrows their order)",
        "imageKeys": [TRADEOFF_IMAGE],
        "step": 0,
        "showRunParams": False,
    }
    lines = [
        {
            **common,
            "metricSectionId": "per-epoch",
            "type": "LINE",
            "runsCountToCompare": 100,
            "lineSmoothness": 0,
            "scaleType": "linear",
            "xAxisScaleType": "linear",
            "yAxisKey": "metric",
            "yAxisExpressions": [],
            "ignoreOutliers": False,
            "useGlobalLineSmoothing": True,
            "displayPoints": True,
            "uuid": f"tradeoff-{key.replace('/', '-')}",
            "displayName": f"{key} per epoch",
            "metricKey": key,
            "selectedMetricKeys": [key],
            "xAxisKey": "step",
            "selectedXAxisMetricKey": "",
            "useGlobalXaxisKey": False,
            **_range(None, axes.get(key)),
        }
        for key in (retrieval_key, semantic_key)
    ]
    rows = min(max(math.ceil(trials / 3), 1), 3)  # more scroll inside the card
    state = {
        "searchFilter": TRIALS_ONLY,
        "orderByKey": f"metrics.`{order_by}`",
        "orderByAsc": False,
        "compareRunCharts": [image, *lines],
        "compareRunSections": [
            {
                "uuid": "tradeoff",
                "name": CHARTS_SECTION,
                "display": True,
                "isReordered": True,
                "columns": 1,
                "cardHeight": 140 + rows * IMAGE_ROW,
            },
            {
                "uuid": "per-epoch",
                "name": EPOCHS_SECTION,
                "display": True,
                "isReordered": True,
                "columns": 1,
                "cardHeight": CHART_HEIGHT,
            },
        ],
        "isAccordionReordered": True,
        "runsHiddenMode": "SHOW_ALL",
        "hideEmptyCharts": True,
        "runListHidden": True,  # the charts the whole width: two rows of legend name more trials
    }
    envelope = {"name": "search charts", "createdAt": now_ms, "updatedAt": now_ms}
    return json.dumps({**envelope, "state": json.dumps(state)})


def _range(x: AxisRange | None, y: AxisRange | None) -> dict[str, Any]:
    """A chart card's axis range (MLflow's ``range``), where one is known."""
    bounds: dict[str, float] = {}
    if x is not None:
        bounds.update(xMin=x.low, xMax=x.high)
    if y is not None:
        bounds.update(yMin=y.low, yMax=y.high)
    return {"range": bounds} if bounds else {}


def charts_url(experiment_id: str, ui: str, key: str) -> str:
    """The MLflow UI's page of a search opened on its chart view (saved under ``key``)."""
    query = f"workflowType=machine_learning&compareRunsMode=CHART&viewStateShareKey={key}"
    return f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"
