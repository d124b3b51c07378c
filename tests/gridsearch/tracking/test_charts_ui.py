"""MLflow's chart view of a search, looked at in headless Chromium: two trials of the
issue's margin sweep (R@10 61-69 and semantic 0.69-0.72 after epoch 0 at chance) written
as a search writes them, without Tune, ``mlflow ui`` on the sqlite store, and the link
the search prints rendered, its DOM read and a screenshot's pixels counted.

Only the first chart (the trade-off) is in the DOM: the UI renders charts as they scroll
into the window."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from PIL import Image

from gridsearch._outcome import Outcome
from gridsearch.summary import TrialOutcome
from gridsearch.tracking._artifacts import CURVE_KEYS
from gridsearch.tracking._curves import charts_url, charts_view
from gridsearch.tracking._parent import close_parent
from gridsearch.tracking._runs import TrialRuns
from gridsearch.tracking._store import ensure_experiment, start_parent_run
from gridsearch.tracking._tags import CHARTS_VIEW, VIEW_TAG_PREFIX
from tests.gridsearch.tracking.mlflow_ui import (
    MlflowUI,
    chromium,
    dump_dom,
    screenshot,
    visible_text,
)
from trainables import names

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(chromium() is None, reason="Chromium is not installed on this machine"),
]

BUDGET_MS = 90_000  # virtual time: the charts load their metric histories one by one
# trial -> (dev R@10 mean per epoch, dev semantic per epoch, margin)
SWEEP = {
    "3f95a1c0": ([10.2, 61.0, 64.0, 68.45, 61.6], [0.21, 0.69, 0.72, 0.70, 0.695], 0.1),
    "8c1f0a2e": ([10.5, 62.0, 64.8, 67.4, 62.6], [0.21, 0.70, 0.715, 0.70, 0.698], 0.3),
}


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("charts")
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    experiment = ensure_experiment(client, "sweep", folder / "artifacts")
    params = {"objective": "retrieval", "searched": ["margin"], "labels": ["margin"]}
    parent = start_parent_run(client, experiment, "sweep", params, {}, {})
    # the view as the search saves it at its start (TrialTracker), before any trial ran
    view = charts_view(*CURVE_KEYS, names.BEST_RETRIEVAL, 0)
    client.set_experiment_tag(experiment, VIEW_TAG_PREFIX + CHARTS_VIEW, view)
    runs, outcomes = TrialRuns(client, experiment, parent, {}), []
    for trial, (retrieval, semantic, margin) in SWEEP.items():
        for epoch, (r, s) in enumerate(zip(retrieval, semantic, strict=True)):
            best = {names.BEST_RETRIEVAL: max(retrieval[: epoch + 1])}
            metrics = {names.PRIMARY_RETRIEVAL: r, names.PRIMARY_SEMANTIC: s, **best}
            runs.log_epoch(trial, {"margin": margin}, epoch, metrics)
        runs.close(trial, {"margin": margin}, Outcome.FINISHED, checkpoint=None)
        outcomes.append(TrialOutcome(trial, {"margin": margin}, best, "finished"))
    close_parent(client, parent, outcomes, "summary", 0, 1.0)
    with MlflowUI(client.tracking_uri, folder / "mlflow-ui.log") as ui:
        yield charts_url(experiment, ui.url, CHARTS_VIEW)


def _ticks(dom: str, axis: str) -> list[float]:
    found = re.findall(rf'class="{axis}tick"><text[^>]*data-unformatted="([^"]+)"', dom)
    return [float(v.replace("\u2212", "-")) for v in found]


def test_the_chart_view_shows_the_trials_on_their_trained_epochs(page: str) -> None:
    dom = dump_dom(page, BUDGET_MS)
    text = visible_text(dom)
    # the trials only, each named by what it tried, in the list and the chart's legend
    listed = re.findall(r"Hide run #[0-9a-f]{6} (trial-\S+ margin=\S+)", text)
    assert listed == ["trial-3f95a1c0 margin=0.1", "trial-8c1f0a2e margin=0.3"], text[:2000]
    assert "2 matching runs" in text and text.count("Hide run #") == 2  # not the search's
    for name in listed:
        assert f"{name} ({names.PRIMARY_SEMANTIC})" in text
    # the trade-off's axes span the trained epochs: epoch 0 (10.2, 0.21) sets neither
    across, up = _ticks(dom, "x"), _ticks(dom, "y")
    assert across and up, text[:2000]
    assert min(across) >= 60 and max(across) <= 70, across
    assert min(up) >= 0.68 and max(up) <= 0.73, up


def test_a_screenshot_of_it_draws_each_trial(page: str, tmp_path: Path) -> None:
    listed = re.findall(r"Hide run (#[0-9a-f]{6}) (trial-\S+)", visible_text(dump_dom(page)))
    colours = {name: colour for colour, name in listed}  # MLflow's colour of each run
    assert len(colours) == 2
    shot = screenshot(page, tmp_path / "charts.png", BUDGET_MS, (1920, 1400))
    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=int)
    charts = pixels[:, pixels.shape[1] // 5 :]  # right of the runs list (dots of its colours)
    for name, colour in colours.items():
        rgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])
        drawn = int((np.abs(charts - rgb).sum(axis=2) < 40).sum())
        assert drawn > 500, f"{name}'s curve ({colour}): {drawn} pixels of its colour"
