"""MLflow's own UI on a real search, looked at in headless Chromium: a tiny ASHA search
(some trials stopped early) through the real CLI, ``mlflow ui`` on its sqlite store, the
tracking REST API read back, and the page the search prints rendered.

What Chromium shows here: the page's title and text, and the runs table's cells (run id,
column, text) from the DOM ag-grid renders (``mlflow_ui.runs_table``), after a virtual
time budget. MLflow 3.17's UI opens an experiment on its GenAI pages unless its "Model
training" switch is on (kept in the browser, or ``workflowType`` in the URL); it does not
read the experiment's kind tag for that, so the tag is checked through the API and the
switch through the printed link.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from gridsearch._outcome import Outcome
from gridsearch.run import main
from gridsearch.tracking._store import results_url
from gridsearch.tracking._tags import (
    EXPERIMENT_KIND_TAG,
    RESULTS_VIEW,
    VIEW_TAG_PREFIX,
    best_trial_tag,
)
from tests.gridsearch.test_selection import SEARCH  # 4 trials, ASHA stops some of them
from tests.gridsearch.tracking.mlflow_ui import (
    MlflowUI,
    chromium,
    dump_dom,
    runs_table,
    screenshot,
    visible_text,
)
from trainables import names

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        chromium() is None,
        reason="Chromium is not installed (looked for chromium, chromium-browser and "
        "/usr/bin/chromium): MLflow's UI cannot be rendered on this machine",
    ),
]

EXPERIMENT = "ui"
OBJECTIVES = (names.BEST_RETRIEVAL, names.BEST_SEMANTIC)
SEARCHED = ("lr_min", "lr_max")  # the lr_bounds space


class RunRow(NamedTuple):
    id: str
    name: str
    status: str
    metrics: dict[str, float]
    params: dict[str, str]
    tags: dict[str, str]


@pytest.fixture(scope="module")
def ui(
    tiny_world: Path, tmp_path_factory: pytest.TempPathFactory, on_cluster: list[str]
) -> Iterator[MlflowUI]:
    runs_dir = tmp_path_factory.mktemp("ui-search")
    argv = [*SEARCH, "--data", str(tiny_world), "--runs-dir", str(runs_dir), *on_cluster]
    assert main([*argv, "--experiment", EXPERIMENT]) == 0
    with MlflowUI(f"sqlite:///{runs_dir / 'mlflow.db'}", runs_dir / "mlflow-ui.log") as server:
        yield server


def _experiment(ui: MlflowUI) -> dict[str, Any]:
    found = ui.api("experiments/get-by-name", {"experiment_name": EXPERIMENT})["experiment"]
    return dict(ui.api("experiments/get", {"experiment_id": found["experiment_id"]})["experiment"])


def _runs(ui: MlflowUI, experiment_id: str, query: str = "") -> list[RunRow]:
    body = {"experiment_ids": [experiment_id], "filter": query, "max_results": 1000}
    found = ui.api("runs/search", body).get("runs", [])
    return [
        RunRow(
            run["info"]["run_id"],
            run["info"]["run_name"],
            run["info"]["status"],
            {m["key"]: m["value"] for m in run["data"].get("metrics", [])},
            {p["key"]: p["value"] for p in run["data"].get("params", [])},
            {t["key"]: t["value"] for t in run["data"].get("tags", [])},
        )
        for run in found
    ]


def _render(url: str, rows: int) -> str:
    """The DOM of ``url`` once its runs table holds ``rows`` rows (a busy machine may
    need more virtual time)."""
    dom = ""
    for budget_ms in (20_000, 40_000, 80_000):
        dom = dump_dom(url, budget_ms)
        if len(runs_table(dom)) >= rows:
            break
    return dom


def test_the_api_holds_the_kind_the_outcomes_and_the_best_values(ui: MlflowUI) -> None:
    experiment = _experiment(ui)
    tags = {t["key"]: t["value"] for t in experiment["tags"]}
    assert tags[EXPERIMENT_KIND_TAG] == "custom_model_development"
    view = json.loads(json.loads(tags[VIEW_TAG_PREFIX + RESULTS_VIEW])["state"])
    assert view["selectedColumns"][-3:] == [*(f"params.`{p}`" for p in SEARCHED), "tags.`outcome`"]

    runs = _runs(ui, experiment["experiment_id"])
    trials = [r for r in runs if r.tags.get("search.role") == "trial"]
    (parent,) = [r for r in runs if r.tags.get("search.role") == "search"]
    assert len(trials) == 4 and parent.status == "FINISHED"
    for trial in trials:  # no failure mark on a trial that ASHA stopped
        assert trial.status == Outcome(trial.tags["outcome"]).status
    stopped = {r.id for r in trials if r.tags["outcome"] == "stopped_early"}
    assert stopped and {r.status for r in trials} == {"FINISHED"}
    query = "tags.outcome = 'stopped_early'"
    assert {r.id for r in _runs(ui, experiment["experiment_id"], query)} == stopped

    by_trial = {r.tags["tune.trial_id"]: r for r in trials}
    for metric in OBJECTIVES:  # the best dev value, under the trials' own name
        best = by_trial[parent.tags[best_trial_tag(metric)]]
        assert parent.metrics[metric] == best.metrics[metric]
        assert best.metrics[metric] == max(r.metrics[metric] for r in trials)
    best = by_trial[parent.tags[best_trial_tag(names.BEST_RETRIEVAL)]]  # the objective's
    for metric in (names.key(names.TEST, "r10_mean"), names.FINISHED, "epoch"):
        assert parent.metrics.get(metric) == best.metrics.get(metric)


def test_the_printed_link_opens_the_runs_table_with_every_trial(
    ui: MlflowUI, tmp_path: Path
) -> None:
    experiment_id = _experiment(ui)["experiment_id"]
    runs = _runs(ui, experiment_id)
    url = results_url(experiment_id, ui.url)
    dom = _render(url, len(runs))
    text = visible_text(dom)
    assert text.startswith(f"Runs - Experiment {experiment_id} - MLflow"), text[:300]
    for genai in ("Observability", "No data available", "Traces 0"):
        assert genai not in text  # not the GenAI overview
    assert "Sort: dev/r10_mean_best" in text and "search results" in text

    table = runs_table(dom)
    assert set(table) == {r.id for r in runs}  # every run, the trials not folded away
    for run in runs:
        row = table[run.id]
        assert run.name in row["attributes.`Run Name`"]
        for metric in OBJECTIVES:
            assert float(row[f"metrics.`{metric}`"]) == pytest.approx(run.metrics[metric])
        if run.tags.get("search.role") == "trial":
            assert row["tags.`outcome`"] == run.tags["outcome"]
            for param in SEARCHED:
                assert row[f"params.`{param}`"] == run.params[param]

    shot = screenshot(url, tmp_path / "runs.png")
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 20_000


def test_with_the_model_training_switch_the_experiment_opens_on_its_runs(ui: MlflowUI) -> None:
    experiment_id = _experiment(ui)["experiment_id"]
    url = f"{ui.url}/#/experiments/{experiment_id}?workflowType=machine_learning"
    text = visible_text(_render(url, 1))
    assert text.startswith(f"Runs - Experiment {experiment_id} - MLflow"), text[:300]
    assert "Observability" not in text and "No data available" not in text
