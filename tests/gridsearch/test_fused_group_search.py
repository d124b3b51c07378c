"""A fused search (``--fuse 2``: two configurations of one shape in one Tune trial,
``gridsearch._fused_search``), end to end through real Ray, MLflow and Optuna on the
CPU, records what the same search records unfused: two Optuna trials, each COMPLETE
with its own value, two MLflow trial runs with the same parameters and metric keys,
each metric at the same steps with the same values to float32 rounding (each member
trains as it would alone); Tune ran one trial, its members fused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import torch

from tests.tolerances import REORDERED
from trainables import names
from trainables.tune import MEMBERS_FUSED

F32 = REORDERED[torch.float32]


def _search(runs_dir: Path, experiment: str, *fuse: str) -> str:
    args = [sys.executable, "-m", "gridsearch.run", "--space", "margin_sweep", "--smoke-test",
            "--no-dashboard", "--scheduler", "fifo", "--runs-dir", str(runs_dir),
            "--experiment", experiment, "--num-samples", "2", "--quiet", *fuse]  # fmt: skip
    done = subprocess.run(args, env=dict(os.environ), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 trials: 2 finished" in done.stdout, done.stdout
    return done.stdout


def _study(runs_dir: Path, experiment: str) -> dict[float, optuna.trial.FrozenTrial]:
    db = runs_dir / "tune" / f"{experiment}.optuna.db"
    study = optuna.load_study(study_name=experiment, storage=f"sqlite:///{db}")
    return {t.params["margin"]: t for t in study.trials}


@pytest.mark.slow
def test_a_fused_search_records_what_the_unfused_search_records(
    tmp_path: Path, mlflow_runs, on_cluster: list[str]
) -> None:
    _search(tmp_path, "fused", "--fuse", "2", *on_cluster)
    _search(tmp_path, "alone", *on_cluster)
    (result,) = (tmp_path / "tune" / "fused").glob("*/result.json")  # one Tune trial
    assert {json.loads(line)[MEMBERS_FUSED] for line in result.read_text().splitlines()} == {1}
    assert len(list((tmp_path / "tune" / "alone").glob("*/result.json"))) == 2
    fused_study, alone_study = _study(tmp_path, "fused"), _study(tmp_path, "alone")
    assert sorted(fused_study) == sorted(alone_study)  # the same two configurations
    for margin, trial in fused_study.items():
        assert trial.state == optuna.trial.TrialState.COMPLETE
        assert trial.value == pytest.approx(alone_study[margin].value, rel=F32.rtol, abs=F32.atol)
        assert sorted(trial.intermediate_values) == sorted(alone_study[margin].intermediate_values)
    assert len({t.value for t in fused_study.values()}) == 2  # each its own
    runs = {}
    for experiment in ("fused", "alone"):
        client, found = mlflow_runs(tmp_path, experiment)
        trials = [r for r in found if r.data.tags.get("search.role") == "trial"]
        assert len(trials) == 2 and {r.info.status for r in trials} == {"FINISHED"}
        runs[experiment] = {float(r.data.params["margin"]): r for r in trials}
    assert sorted(runs["fused"]) == sorted(runs["alone"])
    for margin, fused in runs["fused"].items():
        alone = runs["alone"][margin]
        assert fused.data.params == alone.data.params
        assert sorted(fused.data.metrics) == sorted(alone.data.metrics)
        assert fused.data.tags["outcome"] == "finished"
        for key in (names.LOSS, names.PRIMARY_RETRIEVAL, names.key(names.TEST, "semantic")):
            histories = [
                [(m.step, m.value) for m in client.get_metric_history(r.info.run_id, key)]
                for r in (fused, alone)
            ]
            assert [s for s, _ in histories[0]] == [s for s, _ in histories[1]], key
            for (_, got), (_, want) in zip(*histories, strict=True):
                assert got == pytest.approx(want, rel=F32.rtol, abs=F32.atol), key
