"""Real searches (`--smoke-test`) on a real local Ray with a real MLflow sqlite store,
read back through MLflow's client; and every bad input of the CLI.

One search, read back several ways, stands for what each of its screens shows: its runs,
how MLflow, Optuna and Tune point at each other (the study names its objective after the
metric, each study trial names its Tune trial and MLflow run and each run its study and
trial, the study's steps are the epochs MLflow logs, the parent's summary is not an epoch-0
point, the experiment holds a chart view of the trade-off per epoch), and the store's
baselines (computed once per store and cached beside it, held against the best trials in
the summary, recorded in the parent run, read back by the next search and drawn by the
report). A search is a driver, trial processes and an MLflow store: each one spared is
about 20 CPU-s."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pandas as pd
import pytest

from analysis.report import main as report_main
from gridsearch._baselines import COMPUTING
from gridsearch._optuna import MLFLOW_RUN_ATTR, TUNE_TRIAL_ATTR
from gridsearch.registry import model_name
from gridsearch.run import main
from gridsearch.tracking._curves import CHARTS_SECTION, EPOCHS_SECTION
from gridsearch.tracking._tags import (
    CHARTS_VIEW,
    OPTUNA_STUDY_TAG,
    OPTUNA_TRIAL_TAG,
    TRADEOFF_IMAGE,
    TRIAL_TAG,
    VIEW_TAG_PREFIX,
)
from trainables import names
from trainables.checkpoint import ENSEMBLE_FILE
from trainables.config import TrainConfig

SMOKE = ["--smoke-test", "--no-dashboard", "--scheduler", "fifo"]


def check_runs(client, runs, trials: int, epochs: int) -> None:
    parents = [r for r in runs if r.data.tags.get("search.role") == "search"]
    children = [r for r in runs if r.data.tags.get("search.role") == "trial"]
    assert len(parents) == 1 and len(children) == trials
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert {"space", "sampler", "scheduler", "data_manifest_sha256", "code_version"} <= set(
        parent.data.params
    )
    for run in children:
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.info.status == "FINISHED" and run.data.tags["outcome"] == "finished"
        assert set(TrainConfig.field_names()) <= set(run.data.params)
        for key in (names.PRIMARY_RETRIEVAL, names.PRIMARY_SEMANTIC, "epoch"):
            steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
            assert sorted(steps) == list(range(epochs + 1)), (key, steps)  # each epoch once
        assert names.FINISHED in run.data.metrics
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"config.json", "tradeoff.png", "ensemble.pt"} <= artifacts
    assert not [r for r in runs if r.info.status == "RUNNING"]


def check_links(
    client, runs, study: optuna.Study, experiment: str, trials: int, epochs: int
) -> None:
    """MLflow, Optuna and Tune point at each other after a search named ``experiment``
    that optimised retrieval."""
    assert study.metric_names == [names.BEST_RETRIEVAL]  # not "Objective 0"

    children = [r for r in runs if r.data.tags.get("search.role") == "trial"]
    assert len(children) == trials == len(study.trials)
    for run in children:
        assert run.data.tags[OPTUNA_STUDY_TAG] == experiment
        optuna_trial = study.trials[int(run.data.tags[OPTUNA_TRIAL_TAG])]
        assert optuna_trial.user_attrs[TUNE_TRIAL_ATTR] == run.data.tags[TRIAL_TAG]
        assert optuna_trial.user_attrs[MLFLOW_RUN_ATTR] == run.info.run_id
        # the same steps, each epoch's own value: epoch 0 (untrained) to the last; the
        # trial's value is the running best the search selects on, at its last epoch
        own = client.get_metric_history(run.info.run_id, names.PRIMARY_RETRIEVAL)
        logged = {m.step: m.value for m in own}
        assert sorted(logged) == list(range(epochs + 1))
        assert optuna_trial.intermediate_values == pytest.approx(logged)
        best = client.get_metric_history(run.info.run_id, names.BEST_RETRIEVAL)
        assert optuna_trial.value == pytest.approx({m.step: m.value for m in best}[epochs])
        assert optuna_trial.value == pytest.approx(max(logged.values()))

    [parent] = [r for r in runs if r.data.tags.get("search.role") == "search"]
    assert names.BEST_RETRIEVAL in parent.data.metrics
    for key in parent.data.metrics:  # the search's result, at its last epoch, not at 0
        steps = [m.step for m in client.get_metric_history(parent.info.run_id, key)]
        assert steps == [epochs], key

    view = json.loads(client.get_experiment_by_name(experiment).tags[VIEW_TAG_PREFIX + CHARTS_VIEW])
    state = json.loads(view["state"])
    assert [s["name"] for s in state["compareRunSections"]] == [CHARTS_SECTION, EPOCHS_SECTION]
    image, *per_epoch = state["compareRunCharts"]
    assert (image["type"], image["imageKeys"]) == ("IMAGE", [TRADEOFF_IMAGE])
    assert [c["metricKey"] for c in per_epoch] == [names.PRIMARY_RETRIEVAL, names.PRIMARY_SEMANTIC]
    for run in children:  # each trial's trade-off, epoch by epoch, as the view shows it
        images = client.list_artifacts(run.info.run_id, "images")
        assert any(f.path.startswith(f"images/{TRADEOFF_IMAGE}+step+0+") for f in images)


@pytest.mark.slow
def test_smoke_search_records_every_trial_once(
    tmp_path: Path, mlflow_runs, capsys: pytest.CaptureFixture[str], on_cluster: list[str]
) -> None:
    # One trial at a time: nothing here depends on two running at once, and one trial
    # process is about 5 CPU-s less. The store's baselines on (a smoke test leaves them off).
    args = ["--space", "margin_sweep", *SMOKE, "--runs-dir", str(tmp_path), "--experiment",
            "smoke", "--num-samples", "2", "--objective", "retrieval", "--max-concurrent", "1",
            "--baselines", *on_cluster]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "2 trials: 2 finished" in out
    assert f"mlflow ui --backend-store-uri sqlite:///{tmp_path / 'mlflow.db'}" in out
    assert "baselines: computed once for this store in " in out
    # said before Ray, computed beside the trials, known by the summary
    assert out.index(COMPUTING) < out.index("joining the Ray cluster at ")
    assert out.index("baselines: computed once") < out.index("baselines (test")
    store = tmp_path / "world-smoke"
    cache = json.loads((store / names.BASELINES_FILE).read_text(encoding="utf-8"))
    ridge = cache["baselines"]["ngram_ridge"]
    summary = next(line for line in out.splitlines() if line.startswith("baselines (test"))
    assert f"char n-gram ridge R@10 mean {ridge[names.key(names.TEST, 'r10_mean')]:.1f}" in summary
    assert "  best retrieval trial " in out and "char n-gram ridge (" in out
    client, runs = mlflow_runs(tmp_path, "smoke")
    check_runs(client, runs, trials=2, epochs=2)
    study = optuna.load_study(
        study_name="smoke", storage=f"sqlite:///{tmp_path / 'tune' / 'smoke.optuna.db'}"
    )
    assert [t.number for t in study.trials] == [0, 1]
    check_links(client, runs, study, "smoke", trials=2, epochs=2)
    parent = next(r for r in runs if r.data.tags.get("search.role") == "search")
    logged = client.download_artifacts(parent.info.run_id, names.BASELINES_FILE, str(tmp_path))
    assert json.loads(Path(logged).read_text(encoding="utf-8")) == cache["baselines"]
    assert "already holds a search; continue it with --resume" in _fails(args, capsys)

    # A search started from this one's trials: the sampler sees them, they train anew.
    # The scheduler left at auto: 2 epochs are too few to stop trials early. Each trial
    # the mean of 2 seeds; one trial is enough. Its models cannot be registered (its
    # experiment's logged-models folder is taken by a file): one warning, and the search
    # is whole all the same. The same store: its baselines are read back, not computed.
    versions = len(client.search_model_versions(f"name = '{model_name('margin_sweep')}'"))
    assert versions  # the first search registered its best trials
    blocked = tmp_path / "mlartifacts" / "warm" / "models"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("not a folder")
    warm = ["--space", "margin_sweep", "--smoke-test", "--no-dashboard", "--runs-dir",
            str(tmp_path), "--experiment", "warm", "--num-samples", "1",
            "--warm-start", "smoke", "--seeds-per-config", "2", "--baselines",
            *on_cluster]  # fmt: skip
    assert main(warm) == 0
    out = capsys.readouterr().out
    said = [line.split("] ", 1)[-1] for line in out.splitlines()]  # without the stamps
    warnings = [line for line in said if line.startswith("warning:")]
    assert len(warnings) == 1 and "were not registered" in warnings[0], out
    assert "1 trial: 1 finished" in out and "registered models:/" not in out
    assert "warm start: 2 ended trial(s) of 'smoke' start the study" in out
    assert "no early stopping: every trial trains its 2 epochs (--scheduler auto" in out
    assert ", fifo, objective retrieval, each trial the mean of 2 seeds) as 'warm'" in out
    assert "(sd over seeds)" in out  # the best trial's spread, in the summary
    assert "baselines: comput" not in out and "baselines (test" in out
    study = optuna.load_study(
        study_name="warm", storage=f"sqlite:///{tmp_path / 'tune' / 'warm.optuna.db'}"
    )
    copied = [t for t in study.trials if "warm_start_from" in t.user_attrs]
    assert len(copied) == 2 and len(study.trials) == 3
    client, runs = mlflow_runs(tmp_path, "warm")
    assert len([r for r in runs if r.data.tags.get("search.role") == "trial"]) == 1
    [parent] = [r for r in runs if r.data.tags.get("search.role") == "search"]
    assert parent.data.params["scheduler"] == "fifo"  # what ran, not "auto"
    assert parent.data.params["seeds_per_config"] == "2"
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}
    for run in runs:
        if run.data.tags.get("search.role") == "trial":
            assert names.spread(names.BEST_RETRIEVAL) in run.data.metrics
            assert ENSEMBLE_FILE in {a.path for a in client.list_artifacts(run.info.run_id)}
    registered = client.search_model_versions(f"name = '{model_name('margin_sweep')}'")
    assert len(registered) == versions  # none from this search

    assert report_main(["--runs-dir", str(tmp_path), "--experiment", "smoke", "--no-log"]) == 0
    folder = tmp_path / "reports" / "smoke"
    table = pd.read_csv(folder / "tables" / "baselines.csv")
    assert list(table["baseline"]) == ["char n-gram ridge", "char n-gram cosine", "chance"]
    assert table.loc[0, "dev R@10 mean"] == pytest.approx(ridge[names.PRIMARY_RETRIEVAL])
    page = (folder / "report.html").read_text(encoding="utf-8")
    assert "Baselines of this store" in page
    assert "Grey lines of their own dashes: the store&#x27;s baselines" in page


def _fails(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("error: ") and "Traceback" not in err
    return err


def test_list_spaces(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list-spaces"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [
        "margin_sweep",
        "hidden_size",
        "rnn_type",
        "lr_bounds",
        "pooling",
        "paper_grid",
        "full",
        "encoders",
        "seeds_presets",
    ]


def test_bad_inputs_fail_clearly_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = ["--runs-dir", str(tmp_path / "runs")]
    assert "valid spaces: margin_sweep" in _fails(["--space", "margins", *runs], capsys)
    bad = tmp_path / "space.yaml"
    bad.write_text("name: x\nparams:\n  margn: {type: float, low: 0.1, high: 0.3}\n")
    assert "space.yaml" in _fails(["--space-file", str(bad), *runs], capsys)
    assert "no search named 'nothing'" in _fails(
        ["--experiment", "nothing", "--resume", *runs], capsys
    )
    assert "cannot be used" in _fails(
        ["--space", "margin_sweep", "--tracking-uri", "http://127.0.0.1:9", *runs], capsys
    )
    broken = tmp_path / "store"
    broken.mkdir()
    (broken / "manifest.json").write_text("{}")
    assert "--data" in _fails(["--space", "margin_sweep", "--data", str(broken), *runs], capsys)
    assert not (tmp_path / "runs" / "tune").exists()


@pytest.mark.slow
def test_gpus_asked_for_but_absent(
    tmp_path: Path, mlflow_runs, capsys: pytest.CaptureFixture[str], on_cluster: list[str]
) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    err = _fails(
        [
            "--space",
            "margin_sweep",
            *SMOKE,
            "--gpus-per-trial",
            "0.5",
            "--runs-dir",
            str(tmp_path),
            "--experiment",
            "gpu",
            *on_cluster,
        ],
        capsys,
    )
    assert "--gpus-per-trial 0.5: the Ray cluster has no GPU" in err
    assert not (tmp_path / "tune" / "gpu").exists()
