"""The report and the comparison on a real `--smoke-test` search (see conftest.py)."""

from __future__ import annotations

import base64
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from analysis import compare, report
from tests.analysis.conftest import RealSearch
from tests.corrupt import corrupt_copy
from trainables import names

pytestmark = pytest.mark.slow
TABLES = {
    "trials", "tradeoff_curves", "sensitivity", "pareto_trials", "pareto_epochs", "importance",
    "table_retrieval", "table_semantic",
}  # fmt: skip


def _runs(
    search: RealSearch,
) -> tuple[MlflowClient, str, dict[str, dict[str, float]], dict[str, str]]:
    """(client, parent run id, trial id -> test metrics, trial id -> run id)"""
    client = MlflowClient(search.tracking_uri)
    experiment = client.get_experiment_by_name(search.experiment)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    parent = next(r for r in runs if r.data.tags["search.role"] == "search")
    trials = [r for r in runs if r.data.tags["search.role"] == "trial"]
    metrics = {r.data.tags["tune.trial_id"]: r.data.metrics for r in trials}
    ids = {r.data.tags["tune.trial_id"]: r.info.run_id for r in trials}
    return client, parent.info.run_id, metrics, ids


def test_report_of_a_real_search(real_search: RealSearch, tmp_path: Path, capsys) -> None:
    argv = ["--experiment", real_search.experiment, "--runs-dir", str(real_search.runs_dir)]
    assert report.main([*argv, "--out", str(tmp_path)]) == 0
    assert f"wrote {tmp_path / 'report.html'}" in capsys.readouterr().out
    page = (tmp_path / "report.html").read_text()
    images = page.split('<img class="')[1:]
    assert len(images) >= 4 + 4  # overlay, sensitivity x2, Pareto, importance; a curve per trial
    encoded = images[0].split('src="data:image/png;base64,')[1].split('"')[0]
    assert base64.b64decode(encoded).startswith(b"\x89PNG")
    assert "no paper reference for this data set (synthetic)" in page
    assert {p.stem for p in (tmp_path / "tables").glob("*.csv")} == TABLES

    trials = pd.read_csv(tmp_path / "tables" / "trials.csv")
    assert len(trials) == 4 and set(trials["outcome"]) == {"finished"}
    sensitivity = pd.read_csv(tmp_path / "tables" / "sensitivity.csv")
    kinds = sensitivity.drop_duplicates("param").set_index("param")["kind"].to_dict()
    assert kinds == {"margin": "continuous", "rnn_type": "categorical"}
    assert (sensitivity["ci_low"] <= sensitivity["estimate"]).all()
    assert (sensitivity["estimate"] <= sensitivity["ci_high"]).all()
    importance = pd.read_csv(tmp_path / "tables" / "importance.csv")
    assert set(importance["param"]) == {"margin", "rnn_type"}
    retrieval = pd.read_csv(tmp_path / "tables" / "table_retrieval.csv")
    _, parent, metrics, _ = _runs(real_search)
    for row in retrieval.itertuples():
        assert row.c2i_r1 == metrics[row.model][names.key(names.ENSEMBLE, "c2i_r1")]

    client, parent, _, _ = _runs(real_search)
    logged = {a.path for a in client.list_artifacts(parent, "report")}
    assert logged == {"report/report.html", "report/figures", "report/tables"}
    figures = {a.path for a in client.list_artifacts(parent, "report/figures")}
    assert "report/figures/tradeoff_overlay.png" in figures


def test_compare_two_trials_reproduces_their_logged_test_metrics(
    real_search: RealSearch, tmp_path: Path, capsys
) -> None:
    _, _, metrics, ids = _runs(real_search)
    a, b = sorted(metrics)[:2]
    csv = tmp_path / "compare.csv"
    argv = [ids[a], f"trial-{b}", "--runs-dir", str(real_search.runs_dir), "--csv", str(csv)]
    assert compare.main([*argv, "--resamples", "1000", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"A = {a} (run {ids[a]}), B = {b} (run {ids[b]})")
    assert "Steiger" in out and "sickr_pearson" in out
    rows = pd.read_csv(csv).set_index("metric")
    for name in ("c2i_r1", "i2c_r10", "i2c_medr", "r10_mean"):  # the same ensembles, rebuilt
        assert rows.loc[name, "a"] == pytest.approx(metrics[a][names.key(names.ENSEMBLE, name)])
        assert rows.loc[name, "b"] == pytest.approx(metrics[b][names.key(names.ENSEMBLE, name)])
    semantic = rows[rows["kind"] == "semantic"]
    for key in ("sickr_pearson", "stsb_pearson", "sts12_typos_pearson", "stsb_cosine_pearson"):
        assert semantic.loc[key, "r_a"] == pytest.approx(metrics[a][names.key(names.ENSEMBLE, key)])
    assert semantic["p_steiger"].between(0, 1).all()


def test_compare_a_trial_with_itself_finds_no_difference(
    real_search: RealSearch, tmp_path: Path, capsys
) -> None:
    trial = sorted(_runs(real_search)[2])[0]
    csv = tmp_path / "same.csv"
    argv = [trial, trial, "--runs-dir", str(real_search.runs_dir), "--no-semantic"]
    assert compare.main([*argv, "--resamples", "500", "--csv", str(csv), "--device", "cpu"]) == 0
    rows = pd.read_csv(csv)
    assert (rows["diff"] == 0).all() and (rows["p_bootstrap"] == 1.0).all()


@pytest.mark.parametrize("shard", ["images/test-00000.parquet", "captions/test-00000.parquet"])
def test_compare_refuses_a_corrupt_shard(
    real_search: RealSearch, tmp_path: Path, capsys, shard: str
) -> None:
    trial = sorted(_runs(real_search)[2])[0]
    store = corrupt_copy(real_search.runs_dir / "world-smoke", tmp_path / "store", shard)
    argv = [trial, trial, "--runs-dir", str(real_search.runs_dir), "--data", str(store)]
    assert compare.main([*argv, "--no-semantic", "--resamples", "10"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --data {store}: ")
    assert f"{shard}: checksum mismatch" in err[0]


def test_compare_unknown_run(real_search: RealSearch, capsys) -> None:
    code = compare.main(["nope", "trial-x", "--runs-dir", str(real_search.runs_dir)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(
        "error: 'nope': no MLflow run has that run id, tune.trial_id tag or run name"
    )


def test_compare_says_what_it_is_doing(real_search: RealSearch) -> None:
    """Each step of a comparison is told to ``progress`` as it starts, with its time."""
    client, _, metrics, ids = _runs(real_search)
    a, b = (client.get_run(ids[t]) for t in sorted(metrics)[:2])
    said: list[str] = []
    compare.compare_runs(client, a, b, resamples=50, device="cpu", progress=said.append)
    steps = [line.split("] ", 1)[1].split(" ", 1)[0] for line in said]
    assert steps == ["fetching", "reading", "rebuilding", "ranking", "scoring", "done"]
    assert all(line.startswith("[") and " s] " in line for line in said)
