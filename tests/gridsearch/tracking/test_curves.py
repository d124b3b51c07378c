"""A trial's trade-off curve (the paper's Fig. 4): computed from its metric histories, its
scale (the trained epochs, every epoch ticked), drawn; its trajectory epoch by epoch;
and MLflow's chart view of them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gridsearch.tracking._artifacts import trajectory_image
from gridsearch.tracking._curves import (
    TradeoffCurve,
    charts_view,
    curve_scale,
    draw_tradeoff,
    epoch_ticks,
    tradeoff_curve,
    tradeoff_figure,
    trajectory_figure,
)
from gridsearch.tracking._runs import trial_name
from gridsearch.tracking._tags import TRADEOFF_IMAGE


def test_tradeoff_curve_marks_the_best_semantic_epoch(tmp_path: Path) -> None:
    history = {
        "r": [(0, 5.0), (1, 30.0), (2, 40.0), (3, 45.0)],
        "s": [(0, 0.4), (1, 0.6), (2, 0.55), (3, 0.5)],
    }
    curve = tradeoff_curve(history, "r", "s")
    assert curve.epochs == [0, 1, 2, 3] and curve.best_semantic_epoch == 1
    assert curve.retrieval == [5.0, 30.0, 40.0, 45.0]
    path = draw_tradeoff(curve, tmp_path / "c.png", "t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tradeoff_curve_with_missing_semantic_epochs() -> None:
    curve = tradeoff_curve({"r": [(0, 1.0), (1, 2.0)], "s": [(1, 0.3)]}, "r", "s")
    assert math.isnan(curve.semantic[0]) and curve.best_semantic_epoch == 1


def _curve(retrieval: list[float], semantic: list[float]) -> TradeoffCurve:
    history = {"r": list(enumerate(retrieval)), "s": list(enumerate(semantic))}
    return tradeoff_curve(history, "r", "s")


# the margin sweep: epoch 0 at chance, epochs 1-4 where the trials differ
SWEEP = [
    _curve([10.2, 61.0, 64.0, 68.45, 61.6], [0.21, 0.69, 0.72, 0.70, 0.695]),
    _curve([10.5, 62.0, 64.8, 67.4, 62.6], [0.21, 0.70, 0.715, 0.70, 0.698]),
]


def test_the_scale_spans_the_trained_epochs_and_keeps_epoch_0_off_it() -> None:
    scale = curve_scale(SWEEP)
    assert scale.ticks == [0, 1, 2, 3, 4] and scale.minor == []  # every epoch, 3 included
    r, s = scale.retrieval, scale.semantic
    pad_r, pad_s = 0.08 * (68.45 - 61.0), 0.08 * (0.72 - 0.69)
    assert (r.low, r.high) == pytest.approx((61.0 - pad_r, 68.45 + pad_r))
    assert (s.low, s.high) == pytest.approx((0.69 - pad_s, 0.72 + pad_s))
    assert r.untrained == (10.2, 10.5) and s.untrained == (0.21, 0.21)
    assert r.clip(10.2) == r.low and r.clip(64.0) == 64.0 and math.isnan(r.clip(math.nan))
    inside = curve_scale([_curve([61.0, 60.5, 70.0], [0.7, 0.69, 0.72])])
    assert inside.retrieval.untrained is None and inside.semantic.untrained is None
    only_zero = curve_scale([_curve([10.0], [0.2])])  # nothing trained yet: epoch 0 sets it
    assert only_zero.retrieval.low < 10.0 < only_zero.retrieval.high


def test_every_epoch_is_ticked_the_later_ones_unlabelled_past_8() -> None:
    assert epoch_ticks(4) == ([0, 1, 2, 3, 4], [])
    labelled, minor = epoch_ticks(32)
    assert labelled == [0, 1, 2, 3, 4, 5, 6, 7, 8, 16, 32]
    assert sorted(labelled[1:] + minor) == list(range(1, 33))
    assert epoch_ticks(12) == ([0, 1, 2, 3, 4, 5, 6, 7, 8, 12], [9, 10, 11])


def test_a_trials_figure_is_drawn_on_that_scale(tmp_path: Path) -> None:
    figure = tradeoff_figure(SWEEP[0], "trial-3f95a1c0: margin 0.1")
    left, right = figure.axes
    scale = curve_scale(SWEEP[:1])
    assert left.get_ylim() == pytest.approx((scale.retrieval.low, scale.retrieval.high))
    assert right.get_ylim() == pytest.approx((scale.semantic.low, scale.semantic.high))
    assert [t.get_text() for t in left.get_xticklabels()] == ["0", "1", "2", "3", "4"]
    assert not left.texts and not right.texts  # nothing written over the plot: under it
    assert left.get_xlabel().splitlines() == [
        "epoch (log scale)",
        "dev R@10 mean: epoch 0 below the axis, 10.2",
        "dev semantic: epoch 0 below the axis, 0.21",
    ]
    assert left.get_ylabel().startswith("dev ") and right.get_ylabel().startswith("dev ")
    assert left.get_title() == "trial-3f95a1c0: margin 0.1"
    path = draw_tradeoff(SWEEP[0], tmp_path / "tradeoff.png", "t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_chart_view_shows_each_trials_epochs_in_order_then_each_metric_per_epoch() -> None:
    view = charts_view("r", "s", "r_best", 0, curve_scale(SWEEP), trials=5)
    state = json.loads(json.loads(view)["state"])
    assert state["searchFilter"] == "tags.`search.role` = 'trial'"  # not the search's run
    epochs, per_epoch = state["compareRunSections"]
    # the images three to a row: 2 rows for 5 trials; the charts one large one per row
    assert (epochs["columns"], epochs["cardHeight"]) == (1, 140 + 2 * 300)
    assert state["runListHidden"]  # the charts the whole width, their legends too
    assert (per_epoch["columns"], per_epoch["cardHeight"]) == (1, 520)
    image, retrieval, semantic = state["compareRunCharts"]
    assert image["type"] == "IMAGE" and image["imageKeys"] == [TRADEOFF_IMAGE]
    assert image["metricSectionId"] == epochs["uuid"] and image["step"] == 0
    assert "epoch by epoch" in image["displayName"] and "arrows" in image["displayName"]
    scale = curve_scale(SWEEP)
    for card, key, axis in ((retrieval, "r", scale.retrieval), (semantic, "s", scale.semantic)):
        assert (card["type"], card["xAxisKey"], card["metricKey"]) == ("LINE", "step", key)
        assert card["metricSectionId"] == per_epoch["uuid"]
        assert card["range"] == {"yMin": axis.low, "yMax": axis.high}
    unscaled = json.loads(json.loads(charts_view("r", "s", "r_best", 0))["state"])
    assert all("range" not in card for card in unscaled["compareRunCharts"])  # while it runs


def test_a_trials_trajectory_numbers_its_epochs_and_points_from_each_to_the_next() -> None:
    """MLflow's chart of one metric against another joins a run's points in the order of
    the metric across: the image draws them in epoch order, arrows between them."""
    curve = SWEEP[0]  # R@10 61.0, 64.0, 68.45, 61.6 at epochs 1-4: back to the left at 4
    figure = trajectory_figure(curve, "#de7921")
    (ax,) = figure.axes
    numbers = [t for t in ax.texts if t.get_text().isdigit()]
    assert [t.get_text() for t in numbers] == ["1", "2", "3", "4"]
    assert [t.xy[0] for t in numbers] == [61.0, 64.0, 68.45, 61.6]  # in epoch order
    arrows = [t for t in ax.texts if t.arrow_patch is not None]
    assert [(a.xyann[0], a.xy[0]) for a in arrows] == [(61.0, 64.0), (64.0, 68.45), (68.45, 61.6)]
    assert "epoch 0 off the axes: 10.2, 0.21" in ax.get_xlabel() and "dev" in ax.get_ylabel()
    image = trajectory_image({"dev/r10_mean": [(1, 60.0)], "dev/semantic": [(1, 0.7)]}, "#000")
    assert image is not None and image.shape[2] == 3
    assert (
        trajectory_image({"dev/r10_mean": [(0, 5.0)], "dev/semantic": [(0, 0.1)]}, "#000") is None
    )


def test_a_trials_run_name_says_what_it_tried() -> None:
    config = {"margin": 0.16249999, "rnn_type": "gru", "hidden_size": 8}
    assert trial_name("abc_3f95a1c0", config, ["margin", "rnn_type"]) == (
        "trial-3f95a1c0 margin=0.1625 rnn_type=gru"
    )
    assert trial_name("3f95a1c0", config, []) == "trial-3f95a1c0"
