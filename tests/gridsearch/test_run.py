"""Real searches (`--smoke-test`) on a real local Ray with a real MLflow sqlite store,
read back through MLflow's client; and every bad input of the CLI."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from gridsearch.registry import model_name
from gridsearch.run import main
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


@pytest.mark.slow
def test_smoke_search_records_every_trial_once(
    tmp_path: Path, mlflow_runs, capsys: pytest.CaptureFixture[str], on_cluster: list[str]
) -> None:
    args = [
        "--space",
        "margin_sweep",
        *SMOKE,
        "--runs-dir",
        str(tmp_path),
        "--experiment",
        "smoke",
        "--num-samples",
        "2",
        *on_cluster,
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "2 trials: 2 finished" in out
    assert f"mlflow ui --backend-store-uri sqlite:///{tmp_path / 'mlflow.db'}" in out
    client, runs = mlflow_runs(tmp_path, "smoke")
    check_runs(client, runs, trials=2, epochs=2)
    study = optuna.load_study(
        study_name="smoke", storage=f"sqlite:///{tmp_path / 'tune' / 'smoke.optuna.db'}"
    )
    assert [t.number for t in study.trials] == [0, 1]
    assert "already holds a search; continue it with --resume" in _fails(args, capsys)

    # A search started from this one's trials: the sampler sees them, they train anew.
    # The scheduler left at auto: 2 epochs are too few to stop trials early. Each trial
    # the mean of 2 seeds; one trial is enough. Its models cannot be registered (its
    # experiment's logged-models folder is taken by a file): one warning, and the search
    # is whole all the same.
    versions = len(client.search_model_versions(f"name = '{model_name('margin_sweep')}'"))
    assert versions  # the first search registered its best trials
    blocked = tmp_path / "mlartifacts" / "warm" / "models"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("not a folder")
    warm = ["--space", "margin_sweep", "--smoke-test", "--no-dashboard", "--runs-dir",
            str(tmp_path), "--experiment", "warm", "--num-samples", "1",
            "--warm-start", "smoke", "--seeds-per-config", "2", *on_cluster]  # fmt: skip
    assert main(warm) == 0
    out = capsys.readouterr().out
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "were not registered" in warnings[0], out
    assert "1 trial: 1 finished" in out and "registered models:/" not in out
    assert "warm start: 2 ended trial(s) of 'smoke' start the study" in out
    assert "no early stopping: every trial trains its 2 epochs (--scheduler auto" in out
    assert ", fifo, objective retrieval, each trial the mean of 2 seeds) as 'warm'" in out
    assert "(sd over seeds)" in out  # the best trial's spread, in the summary
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
