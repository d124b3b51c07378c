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
from typing import NamedTuple

__all__ = [
    "TradeoffCurve",
    "charts_url",
    "charts_view",
    "draw_tradeoff",
    "tradeoff_curve",
]

CHARTS_SECTION = "Trade-off (dev, per epoch)"


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
    left.set_title("\n".join(textwrap.wrap(title, 72)), fontsize=9)  # never cut off
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def charts_view(retrieval_key: str, semantic_key: str, order_by: str, now_ms: int) -> str:
    """The value of the experiment tag that saves the search's chart view (``CHARTS_VIEW``):
    a first section with the trade-off (each run a line through its epochs, one point per
    epoch, ``retrieval_key`` across and ``semantic_key`` up), then each of the two against
    epoch; the runs sorted by the metric ``order_by``, best first, which lists the trials
    flat (nested under the search's run they are collapsed, and not drawn), every one
    drawn (the UI draws the first 10 otherwise); MLflow's own sections, one per metric
    prefix, follow."""
    section = "tradeoff"
    common = {"metricSectionId": section, "isGenerated": False, "deleted": False}
    line = {
        **common,
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
    }
    cards = [
        {
            **line,
            "uuid": "tradeoff-curve",
            "displayName": f"{semantic_key} against {retrieval_key} (one point per epoch)",
            "metricKey": semantic_key,
            "selectedMetricKeys": [semantic_key],
            "xAxisKey": "metric",
            "selectedXAxisMetricKey": retrieval_key,
            "useGlobalXaxisKey": False,
        },
        *(
            {
                **line,
                "uuid": f"tradeoff-{key.replace('/', '-')}",
                "displayName": f"{key} per epoch",
                "metricKey": key,
                "selectedMetricKeys": [key],
                "xAxisKey": "step",
                "selectedXAxisMetricKey": "",
                "useGlobalXaxisKey": False,
            }
            for key in (retrieval_key, semantic_key)
        ),
    ]
    state = {
        "orderByKey": f"metrics.`{order_by}`",
        "orderByAsc": False,
        "compareRunCharts": cards,
        "compareRunSections": [
            {"uuid": section, "name": CHARTS_SECTION, "display": True, "isReordered": True}
        ],
        "isAccordionReordered": True,
        "runsHiddenMode": "SHOW_ALL",
        "hideEmptyCharts": True,
    }
    envelope = {"name": "search charts", "createdAt": now_ms, "updatedAt": now_ms}
    return json.dumps({**envelope, "state": json.dumps(state)})


def charts_url(experiment_id: str, ui: str, key: str) -> str:
    """The MLflow UI's page of a search opened on its chart view (saved under ``key``)."""
    query = f"workflowType=machine_learning&compareRunsMode=CHART&viewStateShareKey={key}"
    return f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"
