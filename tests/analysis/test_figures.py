"""Drawing runs on awkward inputs; the trade-off views' axes, ticks and labels read back
from the figures drawn."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from analysis import _compute, _drawing, _families, _figures, _figures_sensitivity
from analysis._data import CATEGORICAL, CONTINUOUS
from tests.analysis.helpers import make_record
from trainables import names


def test_every_figure_draws_on_a_small_record(tmp_path: Path) -> None:
    history = [
        {
            "trial_id": t,
            "epoch": e,
            names.PRIMARY_RETRIEVAL: 10.0 * e + i,
            names.PRIMARY_SEMANTIC: s,
        }
        for i, t in enumerate(("a", "b", "c"))
        for e, s in enumerate((0.4, 0.5, math.nan))
    ]
    configs = (("a", "1024", 1e-5), ("b", "512", 1e-3), ("c", "512", 1e-2))
    trials = [
        {"trial_id": t, "hidden_size": n, "lr_max": lr, names.BEST_RETRIEVAL: 20.0 + i,
         names.BEST_SEMANTIC: 0.5}
        for i, (t, n, lr) in enumerate(configs)
    ]  # fmt: skip
    record = make_record(
        trials, history, param_kinds={"hidden_size": CATEGORICAL, "lr_max": CONTINUOUS}
    )
    table = _compute.sensitivity(record)
    for param, kind in record.param_kinds.items():
        rows = table[table["param"] == param]
        assert _figures.draw_sensitivity(rows, param, kind, tmp_path / f"{param}.png").exists()
    curves = _compute.tradeoff_curves(record)
    assert _figures.draw_tradeoff_overlay(curves, tmp_path / "overlay.png").exists()
    pareto = _figures.draw_pareto(
        _compute.pareto_over_trials(record), _compute.pareto_over_epochs(record), tmp_path / "p.png"
    )
    assert pareto.exists()
    importances = pd.DataFrame(
        {"objective": ["r", "r"], "param": ["hidden_size", "lr_max"], "importance": [0.7, 0.3]}
    )
    assert _figures.draw_importances(importances, tmp_path / "i.png").exists()


def test_categories_in_numeric_order_when_numbers() -> None:
    assert _figures_sensitivity._categories(pd.Series(["1024", "512", "2048", "512"])) == [
        "512",
        "1024",
        "2048",
    ]
    assert _figures_sensitivity._categories(pd.Series(["lstm", "gru"])) == ["gru", "lstm"]


def test_no_legend_covers_the_plotting_area(tmp_path: Path, monkeypatch) -> None:
    """Every legend of every figure sits outside its axes, so it hides no point: checked
    on points in every corner (a legend inside the axes once hid a Pareto point)."""
    figures = []
    save = _drawing.save
    monkeypatch.setattr(
        _drawing, "save", lambda fig, path, **kw: figures.append(fig) or save(fig, path, **kw)
    )
    corners = [(0.0, 0.0), (100.0, 0.0), (0.0, 1.0), (100.0, 1.0), (50.0, 0.5)]
    history = [
        {"trial_id": f"t{k}", "epoch": e, names.PRIMARY_RETRIEVAL: r * e / 2,
         names.PRIMARY_SEMANTIC: s * e / 2}
        for k, (r, s) in enumerate(corners)
        for e in range(3)
    ]  # fmt: skip
    trials = [
        {"trial_id": f"t{k}", "margin": 0.1 + 0.05 * k, "family": ("char_rnn", "word_bow")[k % 2],
         names.BEST_RETRIEVAL: r, names.BEST_SEMANTIC: s}
        for k, (r, s) in enumerate(corners)
    ]  # fmt: skip
    record = make_record(trials, history, param_kinds={"margin": CONTINUOUS})
    record.baselines.update({"ngram_ridge": {names.PRIMARY_RETRIEVAL: 50.0,
                                             names.PRIMARY_SEMANTIC: 0.5}})  # fmt: skip
    curves = _compute.tradeoff_curves(record)
    references = _compute.reference_lines(record)
    _figures.draw_tradeoff_overlay(curves, tmp_path / "o.png", references)
    _figures.draw_family_overlay(_families.family_curves(record), tmp_path / "f.png", references)
    _figures.draw_pareto(
        _compute.pareto_over_trials(record), _compute.pareto_over_epochs(record), tmp_path / "p.png"
    )
    table = _compute.sensitivity(record)
    _figures.draw_sensitivity(table, "margin", CONTINUOUS, tmp_path / "s.png")
    legends = 0
    for fig in figures:
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        renderer = canvas.get_renderer()
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is not None:
                legends += 1
                assert not legend.get_window_extent(renderer).overlaps(
                    ax.get_window_extent(renderer)
                ), ax.get_title()
        for legend in fig.legends:  # one below all panels: it overlaps none of them
            legends += 1
            for ax in fig.axes:
                assert not legend.get_window_extent(renderer).overlaps(
                    ax.get_window_extent(renderer)
                ), ax.get_title()
    # the trials' overlay: one for trials and baselines; the families' overlay: families,
    # baselines; Pareto 2; margin 3 (the stable range in each panel, the families)
    assert legends == 8


def test_coinciding_curves_are_drawn_with_different_markers_and_dashes(
    tmp_path: Path, monkeypatch
) -> None:
    same = [
        {"trial_id": t, "epoch": e, names.PRIMARY_RETRIEVAL: 10.0 * e, names.PRIMARY_SEMANTIC: 0.4}
        for t in ("a", "b", "c")
        for e in range(3)
    ]
    record = make_record([{"trial_id": t} for t in "abc"], same)
    figures = []
    save = _drawing.save
    monkeypatch.setattr(
        _drawing, "save", lambda fig, path, **kw: figures.append(fig) or save(fig, path, **kw)
    )
    _figures.draw_tradeoff_overlay(_compute.tradeoff_curves(record), tmp_path / "o.png")
    lines = [line for line in figures[0].axes[0].get_lines() if line.get_label() in "abc"]
    styles = {(line.get_marker(), line.get_linestyle()) for line in lines}
    assert len(lines) == 3 and len(styles) == 3


def test_the_trade_off_views_show_the_trained_epochs_and_name_each_trial(
    tmp_path: Path, monkeypatch
) -> None:
    """The issue's margin sweep: epoch 0 at chance no longer sets the axes (R@10 61-69 and
    semantic 0.69-0.72 filled them as flat lines along the top), every epoch is ticked, and
    every point of the Pareto views says its trial and margin."""
    from gridsearch.tracking import curve_scale

    sweep = {
        "a": ([10.2, 61.0, 64.0, 68.45, 61.6], [0.21, 0.69, 0.72, 0.70, 0.695], 0.1),
        "b": ([10.5, 62.0, 64.8, 67.4, 62.6], [0.21, 0.70, 0.715, 0.70, 0.698], 0.3),
    }
    history = [
        {"trial_id": t, "epoch": e, names.PRIMARY_RETRIEVAL: r[e], names.PRIMARY_SEMANTIC: s[e]}
        for t, (r, s, _) in sweep.items()
        for e in range(5)
    ]
    trials = [
        {"trial_id": t, "margin": m, names.BEST_RETRIEVAL: max(r), names.BEST_SEMANTIC: max(s)}
        for t, (r, s, m) in sweep.items()
    ]
    record = make_record(trials, history, param_kinds={"margin": CONTINUOUS})
    figures = []
    save = _drawing.save
    monkeypatch.setattr(
        _drawing, "save", lambda fig, path, **kw: figures.append(fig) or save(fig, path, **kw)
    )
    curves = _compute.tradeoff_curves(record)
    labels = {t: f"{t}: margin={m}" for t, (_, _, m) in sweep.items()}
    _figures.draw_tradeoff_overlay(curves, tmp_path / "o.png", labels=labels)
    scale = curve_scale(list(curves.values()))
    retrieval_ax, semantic_ax = figures[0].axes
    assert retrieval_ax.get_ylim() == pytest.approx((scale.retrieval.low, scale.retrieval.high))
    assert semantic_ax.get_ylim() == pytest.approx((scale.semantic.low, scale.semantic.high))
    assert scale.retrieval.low > 60 and scale.semantic.low > 0.68  # not from epoch 0
    for ax, what in ((retrieval_ax, "dev R@10 mean"), (semantic_ax, "dev semantic")):
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2", "3", "4"]
        assert f"{what}: epoch 0 below the axis" in ax.get_xlabel()  # under the axes
    # a baseline near the trials widens the axes to show its line; chance stays off, named
    references = [
        _compute.ReferenceLine("char n-gram ridge", 59.5, 0.6777),
        _compute.ReferenceLine("chance", 5.0, math.nan),
    ]
    _figures.draw_tradeoff_overlay(curves, tmp_path / "o.png", references, labels)
    retrieval_ax, semantic_ax = figures[1].axes
    assert retrieval_ax.get_ylim()[0] < 59.5 and semantic_ax.get_ylim()[0] < 0.6777
    assert retrieval_ax.get_ylim()[1] == pytest.approx(scale.retrieval.high)
    said = retrieval_ax.get_xlabel().splitlines()
    assert said[1].startswith("dev R@10 mean: epoch 0 below")
    assert said[2] == "baselines off the axis: chance 5"
    assert "baselines" not in semantic_ax.get_xlabel()
    # no text over a panel, where a baseline's line would run through it; the baselines'
    # dash patterns are none of the trials'
    assert not retrieval_ax.texts and not semantic_ax.texts
    trials = {tuple(line._unscaled_dash_pattern[1] or ()) for line in retrieval_ax.lines
              if line.get_marker() not in ("None", "", "*")}  # fmt: skip
    baselines = {tuple(line._unscaled_dash_pattern[1] or ()) for line in retrieval_ax.lines
                 if line.get_marker() in ("None", "") and line.get_color() == "0.45"}  # fmt: skip
    assert trials and baselines and not trials & baselines
    _figures.draw_pareto(
        _compute.pareto_over_trials(record),
        _compute.pareto_over_epochs(record),
        tmp_path / "p.png",
        labels,
    )
    by_trials, by_epochs = figures[2].axes
    assert sorted(t.get_text() for t in by_trials.texts) == sorted(labels.values())
    legend = [t.get_text() for t in by_epochs.get_legend().get_texts()]
    assert legend[:2] == list(labels.values())
    assert sorted(t.get_text() for t in by_epochs.texts) == sorted(["1", "2", "3", "4"] * 2)
    assert all(t.get_fontsize() >= 9 for t in by_epochs.texts)  # readable epochs
