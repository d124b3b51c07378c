"""A trial's trade-off curve (the paper's Fig. 4): computed from its metric histories, then
drawn."""

from __future__ import annotations

import math
from pathlib import Path

from gridsearch.tracking._curves import draw_tradeoff, tradeoff_curve


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
