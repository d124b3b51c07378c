"""A search selects on dev data only: run the same search on the embedded world and on a
copy whose every test set is shuffled (the test split's image-caption pairing and every
test gold score of the semantic sets), and it samples the same configurations, makes
the same ASHA decisions, keeps the same ensemble snapshots and crowns the same trials.
The shuffled copy's search runs with --quiet, which must change none of that and print
the summary only. Also: a corrupt shard stops the search before anything starts.

The honest search (3 trials, some stopped by ASHA) is also the one MLflow's own UI is
looked at in a real browser, below: ``mlflow ui`` on its store, the tracking REST API
read back, and the pages the search prints rendered by headless Chromium, driven through
chromedriver (``tests/gridsearch/tracking/mlflow_ui.py``) in a window of 1,600 x 900
pixels: the runs table lists the trials alone, each in its own colour, its searched
parameters in view and the search's own run linked above; the chart view shows each
trial's trade-off epoch by epoch and every trial in every chart's legend. Those tests skip
where Chromium and chromedriver are not installed (CI installs them: ``.ci/run``). MLflow
3.17's UI opens an experiment on its GenAI pages unless its "Model training" switch is on
(kept in the browser, or ``workflowType`` in the URL); it does not read the experiment's
kind tag for that, so the tag is checked through the API and the switch through the
printed link."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

from gridsearch._outcome import Outcome
from gridsearch.run import main
from gridsearch.tracking._curves import EPOCHS_SECTION, charts_url
from gridsearch.tracking._store import results_url
from gridsearch.tracking._tags import (
    CHARTS_VIEW,
    EXPERIMENT_KIND_TAG,
    RESULTS_VIEW,
    RUN_COLOUR_TAG,
    TRADEOFF_IMAGE,
    VIEW_TAG_PREFIX,
    best_trial_tag,
)
from storage import FeatureStore, StoreWriter
from tests.corrupt import corrupt_copy
from tests.gridsearch.tracking.mlflow_ui import Browser, MlflowUI, chromedriver, chromium
from trainables import names

# lr_bounds: trials that differ after one epoch, so that ASHA stops some of them; one at a
# time, so that the sampler sees the results in the same order in both searches. 3 trials
# of 2 epochs, the fewest that still make both ASHA decisions: its one rung at epoch 1
# (the smoke test's 1-epoch cycles) stops the trials below the median so far there, and
# the others finish at epoch 2.
SEARCH = [
    "--space", "lr_bounds", "--smoke-test", "--no-dashboard", "--objective", "retrieval",
    "--scheduler", "asha", "--num-samples", "3", "--max-concurrent", "1", "--epochs", "2",
]  # fmt: skip


def _shuffle_column(path: Path, column: int, rng: np.random.Generator, header: bool) -> None:
    """Permute one tab-separated column of a SentEval file (the gold scores)."""
    lines = path.read_text().splitlines()
    head, rows = (lines[:1], lines[1:]) if header else ([], lines)
    fields = [row.split("\t") for row in rows]
    scores = [f[column] for f in fields]
    for f, score in zip(fields, rng.permutation(scores), strict=True):
        f[column] = str(score)
    path.write_text("\n".join(head + ["\t".join(f) for f in fields]) + "\n")


def shuffled_test_copy(store: Path, out: Path, seed: int = 0) -> Path:
    """``store`` rewritten with its test split's features permuted across images and
    every test gold score of its semantic sets permuted; train, val and every dev set
    byte for byte the same."""
    rng = np.random.default_rng(seed)
    source = FeatureStore.open(store)
    m = source.manifest
    writer = StoreWriter(
        out,
        fingerprint={"source": "shuffled test sets", "seed": seed},
        feature_dim=m.feature_dim,
        feature_dtype=m.feature_dtype,
        feature_compression="none",
    )
    records = {}
    for split in ("train", "val", "test"):
        data = source.read_split(split)
        features = data.features[rng.permutation(len(data))] if split == "test" else data.features
        records[split] = [writer.write_shard(split, 0, data.image_ids, features, data.captions)]
    senteval = out / "senteval"
    shutil.copytree(store / m.extras["senteval"], senteval)
    for gold in (senteval / "STS").glob("STS1*-en-test/STS.gs.*.txt"):
        lines = gold.read_text().splitlines()
        gold.write_text("\n".join(rng.permutation(lines)) + "\n")
    _shuffle_column(senteval / "STS" / "STSBenchmark" / "sts-test.csv", 4, rng, header=False)
    _shuffle_column(senteval / "SICK" / "SICK_test_annotated.txt", 3, rng, header=True)
    writer.finish(
        dataset=m.dataset,
        feature_extractor=m.feature_extractor,
        splits=records,
        extras={"senteval": "senteval"},
    )
    return out


def _config(run) -> tuple[str, str]:
    return run.data.params["lr_min"], run.data.params["lr_max"]


def _trials(mlflow_runs, runs_dir: Path, experiment: str) -> dict[tuple[str, str], dict]:
    """Per sampled configuration: its outcome, every dev metric's history, its ensemble's
    snapshot epochs and its test values."""
    client, runs = mlflow_runs(runs_dir, experiment)
    trials = {}
    for run in (r for r in runs if r.data.tags.get("search.role") == "trial"):
        metrics = run.data.metrics
        dev = {
            key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
            for key in metrics
            if key.startswith("dev/")
        }
        trials[_config(run)] = {
            "outcome": run.data.tags["outcome"],
            "dev": dev,
            "snapshots": {k: v for k, v in metrics.items() if k.startswith("ensemble/epoch_")},
            "test": {k: v for k, v in metrics.items() if k.startswith(("test/", "ensemble/"))},
        }
    return trials


def _best(out: str, configs: dict[str, tuple[str, str]]) -> list[tuple[str, str]]:
    """The configurations of the summary's best trials (their ids mapped by ``configs``)."""
    lines = [line for line in out.splitlines() if line.startswith("best ")]
    return [configs[line.split()[2].rstrip(":")] for line in lines]


class Search(NamedTuple):
    runs_dir: Path
    experiment: str
    out: str  # what it printed


@pytest.fixture(scope="module")
def honest(
    tiny_world: Path, tmp_path_factory: pytest.TempPathFactory, on_cluster: list[str]
) -> Search:
    """SEARCH on the session's world (a search only reads its store, so not a build of the
    same one): the selection test's honest search, and the UI tests'."""
    runs_dir = tmp_path_factory.mktemp("honest") / "runs"
    argv = [*SEARCH, "--data", str(tiny_world), "--runs-dir", str(runs_dir)]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main([*argv, "--experiment", "honest", *on_cluster]) == 0
    return Search(runs_dir, "honest", printed.getvalue())


@pytest.mark.slow
def test_shuffled_test_sets_select_the_same_trials(
    honest: Search, tiny_world: Path, tmp_path: Path, mlflow_runs,
    capfd: pytest.CaptureFixture[str], on_cluster: list[str],
) -> None:  # fmt: skip
    """The shuffled copy's search also runs with --quiet (for scripts): the summary and
    nothing else (no progress lines, no closing commands, no library warnings, not even on
    the file descriptors); the exit status as without it."""
    runs_dir = tmp_path / "runs-shuffled"
    store = shuffled_test_copy(tiny_world, tmp_path / "s")
    argv = [*SEARCH, "--data", str(store), "--runs-dir", str(runs_dir), "--experiment", "shuffled"]
    capfd.readouterr()
    assert main([*argv, "--quiet", *on_cluster]) == 0
    out, err = capfd.readouterr()
    assert err.strip() == ""
    outs = {"honest": honest.out, "shuffled": out}
    searches = {"honest": honest.runs_dir, "shuffled": runs_dir}
    found, best = {}, {}
    for name, folder in searches.items():
        found[name] = _trials(mlflow_runs, folder, name)
        _, runs = mlflow_runs(folder, name)
        configs = {
            r.data.tags["tune.trial_id"]: _config(r)
            for r in runs
            if r.data.tags.get("search.role") == "trial"
        }
        best[name] = _best(outs[name], configs)
    honest_trials, shuffled = found["honest"], found["shuffled"]
    assert len(honest_trials) == 3 and honest_trials.keys() == shuffled.keys()  # the same configs
    outcomes = [t["outcome"] for t in honest_trials.values()]
    assert "stopped_early" in outcomes and "finished" in outcomes  # ASHA decided something
    for config, trial in honest_trials.items():
        other = shuffled[config]
        assert trial["outcome"] == other["outcome"]  # the same ASHA decision
        assert trial["dev"] == other["dev"]  # every dev value at every epoch
        assert trial["snapshots"] == other["snapshots"]  # the same ensemble
    assert best["honest"] == best["shuffled"] and len(best["honest"]) == 2
    finished = [m for m, t in honest_trials.items() if t["outcome"] == "finished"]
    assert any(honest_trials[m]["test"] != shuffled[m]["test"] for m in finished)  # test moved
    assert names.key(names.TEST, "sts12_16_pearson") in next(iter(honest_trials.values()))["test"]
    # --quiet: its summary first, the same as without it; nothing else of the screen
    counts = next(line for line in outs["honest"].splitlines() if line.startswith("3 trials: "))
    assert outs["shuffled"].splitlines()[0] == counts and "best retrieval" in outs["shuffled"]
    assert "start 1/" in outs["honest"] and "trials done" in outs["honest"]  # what it drops
    assert "mlflow ui" in outs["honest"]
    for noise in ("start 1/", "trials done", "mlflow ui"):
        assert noise not in outs["shuffled"], noise


def test_a_corrupt_shard_stops_the_search_before_it_starts(
    tiny_world: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = corrupt_copy(tiny_world, tmp_path / "store")
    runs_dir = tmp_path / "runs"
    for via in ("object-store", "uri"):
        argv = [*SEARCH, "--data", str(store), "--runs-dir", str(runs_dir), "--data-via", via]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: --data: ")
        assert "images/train-00000.parquet: checksum mismatch" in err[0]
    assert not (runs_dir / "tune").exists()


# -- MLflow's UI on the honest search, in Chromium ---------------------------------------

SEARCHED = ("lr_min", "lr_max")  # the lr_bounds space
OBJECTIVES = (names.BEST_RETRIEVAL, names.BEST_SEMANTIC)
WINDOW = (1600, 900)  # a laptop's screen; MLflow's assistant takes 410 pixels of it


def needs_chromium(test: Any) -> Any:
    """A UI test: slow (it waits for the honest search), skipped without a browser."""
    skip = pytest.mark.skipif(
        chromium() is None or chromedriver() is None,
        reason="Chromium and chromedriver are not installed (Debian: apt-get install "
        "chromium chromium-driver): MLflow's UI cannot be rendered on this machine",
    )
    return pytest.mark.slow(skip(test))


class RunRow(NamedTuple):
    id: str
    name: str
    status: str
    metrics: dict[str, float]
    params: dict[str, str]
    tags: dict[str, str]


class Page(NamedTuple):
    ui: MlflowUI
    browser: Browser
    experiment: dict[str, Any]  # as the REST API returns it
    trials: list[RunRow]
    parent: RunRow


@pytest.fixture(scope="module")
def page(honest: Search, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    """``mlflow ui`` on the honest search's store, and a browser to look at it."""
    if chromium() is None or chromedriver() is None:
        pytest.skip("Chromium and chromedriver are not installed")
    log = tmp_path_factory.mktemp("ui") / "mlflow-ui.log"
    with MlflowUI(f"sqlite:///{honest.runs_dir / 'mlflow.db'}", log) as ui, Browser(WINDOW) as b:
        found = ui.api("experiments/get-by-name", {"experiment_name": honest.experiment})
        experiment_id = found["experiment"]["experiment_id"]
        experiment = ui.api("experiments/get", {"experiment_id": experiment_id})["experiment"]
        runs = _runs(ui, experiment_id)
        (parent,) = [r for r in runs if r.tags.get("search.role") == "search"]
        trials = [r for r in runs if r.tags.get("search.role") == "trial"]
        yield Page(ui, b, dict(experiment), trials, parent)


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


@needs_chromium
def test_the_api_holds_the_kind_the_outcomes_and_the_best_values(page: Page) -> None:
    tags = {t["key"]: t["value"] for t in page.experiment["tags"]}
    assert tags[EXPERIMENT_KIND_TAG] == "custom_model_development"
    view = json.loads(json.loads(tags[VIEW_TAG_PREFIX + RESULTS_VIEW])["state"])
    assert view["selectedColumns"][:2] == [f"params.`{p}`" for p in SEARCHED]

    trials, parent = page.trials, page.parent
    assert len(trials) == 3 and parent.status == "FINISHED"
    for trial in trials:  # no failure mark on a trial that ASHA stopped
        assert trial.status == Outcome(trial.tags["outcome"]).status
    stopped = {r.id for r in trials if r.tags["outcome"] == "stopped_early"}
    assert stopped and {r.status for r in trials} == {"FINISHED"}
    query = "tags.outcome = 'stopped_early'"
    assert {r.id for r in _runs(page.ui, page.experiment["experiment_id"], query)} == stopped
    by_trial = {r.tags["tune.trial_id"]: r for r in trials}
    for metric in OBJECTIVES:  # the best dev value, under the trials' own name
        best = by_trial[parent.tags[best_trial_tag(metric)]]
        assert parent.metrics[metric] == best.metrics[metric]
        assert best.metrics[metric] == max(r.metrics[metric] for r in trials)
    best = by_trial[parent.tags[best_trial_tag(names.BEST_RETRIEVAL)]]  # the objective's
    for metric in (names.key(names.TEST, "r10_mean"), names.FINISHED, "epoch"):
        assert parent.metrics.get(metric) == best.metrics.get(metric)
    colours = [r.tags[RUN_COLOUR_TAG] for r in trials]
    assert len(set(colours)) == len(trials)  # each trial its own colour


# the runs table: each row's run id, its cells' text and colour; each column header's left
# and right edge, and the grid's visible part
TABLE = """
const rows = {};
for (const row of document.querySelectorAll('[role=row][row-id]')) {
  const id = row.getAttribute('row-id');
  rows[id] = rows[id] || {};
  for (const cell of row.querySelectorAll('[role=gridcell][col-id]')) {
    rows[id][cell.getAttribute('col-id')] = cell.textContent.trim();
  }
  const colour = row.querySelector('[data-testid=experiment-view-table-run-color] input');
  if (colour) rows[id].colour = colour.value;
}
const heads = {};
for (const head of document.querySelectorAll('[role=columnheader][col-id]')) {
  const box = head.getBoundingClientRect();
  heads[head.getAttribute('col-id')] = [box.left, box.right];
}
const viewport = document.querySelector('.ag-body-viewport');
if (!viewport) return {rows: {}};
const grid = viewport.getBoundingClientRect();
const links = [...document.querySelectorAll('a')].map(a => a.getAttribute('href'));
return {rows, heads, grid: [grid.left, grid.right], links};
"""


@needs_chromium
def test_the_runs_table_shows_each_trial_in_its_colour_with_its_searched_parameters(
    page: Page,
) -> None:
    """The link the search prints, at 1,600 pixels: the trials alone, best first, each
    cell as the API holds it, the searched parameters' columns in view, each trial's own
    colour; the search's own run linked from the description above the table."""
    browser, trials = page.browser, page.trials
    browser.open(results_url(page.experiment["experiment_id"], page.ui.url))
    shown = browser.wait_for(TABLE, until=lambda found: len(found["rows"]) >= len(trials))
    assert set(shown["rows"]) == {r.id for r in trials}  # not the search's own run
    left, right = shown["grid"]
    for trial in trials:
        row = shown["rows"][trial.id]
        assert (
            trial.name in row["attributes.`Run Name`"]
            and row["colour"] == trial.tags[RUN_COLOUR_TAG]
        )
        assert row["tags.`outcome`"] == trial.tags["outcome"]
        for metric in OBJECTIVES:
            assert float(row[f"metrics.`{metric}`"]) == pytest.approx(trial.metrics[metric])
        for param in SEARCHED:
            assert row[f"params.`{param}`"] == trial.params[param]
    for column in (*(f"params.`{p}`" for p in SEARCHED), "tags.`outcome`"):  # in view
        start, end = shown["heads"][column]  # without scrolling, beside MLflow's assistant
        assert left <= start and end <= right, (column, start, end, left, right)
    assert (
        f"#/experiments/{page.experiment['experiment_id']}/runs/{page.parent.id}" in shown["links"]
    )  # the search's own run, apart from the trials


# the chart view: the trade-off images shown, per trial (run id); a chart's legend entries
# (ending in its metric), each with whether it is inside the legend's visible box, and its
# y-axis ticks
IMAGES = """
return [...document.querySelectorAll('img')]
  .filter(i => i.complete && i.naturalWidth > 0 && i.src.includes(arguments[0]))
  .map(i => new URL(i.src).searchParams.get('run_uuid'));
"""
LEGEND = """
const metric = arguments[0], section = arguments[1];
const heads = [...document.querySelectorAll('h4')];
const head = heads.find(h => h.textContent == metric);
if (!head) {  // the UI draws a chart once it is scrolled into view: scroll on
  const title = [...document.querySelectorAll('div')].find(
    e => e.childElementCount == 0 && e.textContent == section);
  if (!title) return null;
  let box = title.parentElement;  // the charts' scrolling area
  while (box && !(box.scrollHeight > box.clientHeight + 1 &&
                  ['auto', 'scroll'].includes(getComputedStyle(box).overflowY))) {
    box = box.parentElement;
  }
  if (!box || title.getBoundingClientRect().top > box.getBoundingClientRect().bottom) {
    title.scrollIntoView();
  } else {
    box.scrollTop += box.clientHeight / 2;
  }
  return null;
}
head.scrollIntoView();
const entries = [...document.querySelectorAll('span')].filter(
  s => s.childElementCount == 0 && s.textContent.endsWith('(' + metric + ')'));
let card = head;
while (card && !card.querySelector('.ytick')) card = card.parentElement;
const ticks = card ? [...card.querySelectorAll('.ytick text')].map(
  t => parseFloat(t.getAttribute('data-unformatted').replace('\u2212', '-'))) : [];
return {
  ticks,
  legend: entries.map(s => {
    const box = s.parentElement.parentElement.getBoundingClientRect();
    const at = s.getBoundingClientRect();
    return [s.textContent, at.top >= box.top - 1 && at.bottom <= box.bottom + 1];
  }),
};
"""


@needs_chromium
def test_the_chart_view_shows_each_trials_epochs_in_order_and_every_trial_in_each_legend(
    page: Page,
) -> None:
    """The second link the search prints, at 1,600 pixels: one image per trial of its dev
    semantic against its dev R@10 mean, epoch by epoch (MLflow's own chart of one metric
    against another joins a run's points in the order of the metric across); then each
    of the two against epoch, every trial named in the chart's legend where it can be
    read (the legend is 32 pixels high: two rows), on axes spanning the trained epochs
    (epoch 0, near chance, falls below them)."""
    browser, trials = page.browser, page.trials
    tags = {t["key"]: t["value"] for t in page.experiment["tags"]}
    view = json.loads(json.loads(tags[VIEW_TAG_PREFIX + CHARTS_VIEW])["state"])
    ranges = {card["metricKey"]: card["range"] for card in view["compareRunCharts"][1:]}
    browser.open(charts_url(page.experiment["experiment_id"], page.ui.url, CHARTS_VIEW))
    key = f"images%2F{TRADEOFF_IMAGE}%2B"
    shown = browser.wait_for(IMAGES, key, until=lambda found: len(found) >= len(trials))
    assert sorted(shown) == sorted(r.id for r in trials)  # each trial's, once
    for metric in (names.PRIMARY_RETRIEVAL, names.PRIMARY_SEMANTIC):
        chart = browser.wait_for(
            LEGEND,
            metric,
            EPOCHS_SECTION,
            until=lambda c: bool(c) and len(c["legend"]) >= len(trials) and bool(c["ticks"]),
        )
        legend = chart["legend"]
        assert sorted(name for name, _ in legend) == sorted(f"{r.name} ({metric})" for r in trials)
        assert all(visible for _, visible in legend), legend
        low, high = ranges[metric]["yMin"], ranges[metric]["yMax"]
        ticks = chart["ticks"]
        assert low <= min(ticks) and max(ticks) <= high, (metric, ticks, low, high)
        last = [trial.metrics[metric] for trial in trials]  # each one's last epoch
        assert all(low <= value <= high for value in last), (metric, last, low, high)


@needs_chromium
def test_with_the_model_training_switch_the_experiment_opens_on_its_runs(page: Page) -> None:
    experiment_id = page.experiment["experiment_id"]
    page.browser.open(f"{page.ui.url}/#/experiments/{experiment_id}?workflowType=machine_learning")
    text = page.browser.wait_for(
        "const t = document.body.innerText; return t.includes('matching run') ? t : null"
    )
    assert page.browser.run("return document.title").startswith(
        f"Runs - Experiment {experiment_id}"
    )
    for genai in ("Observability", "No data available", "Traces 0"):
        assert genai not in text  # not the GenAI overview
