"""Drawing runs on awkward inputs (the pictures themselves are not checked)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from analysis import _compute, _figures
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
    assert _figures._categories(pd.Series(["1024", "512", "2048", "512"])) == [
        "512",
        "1024",
        "2048",
    ]
    assert _figures._categories(pd.Series(["lstm", "gru"])) == ["gru", "lstm"]
