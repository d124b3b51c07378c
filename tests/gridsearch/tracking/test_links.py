"""MLflow, Optuna and Tune point at each other after a real search (a Ray local cluster,
MLflow's sqlite store, Optuna's sqlite storage): the study names its objective after the
metric, each study trial names its Tune trial and MLflow run and each run its study and
trial, the study's steps are the epochs MLflow logs, the parent's summary is not an
epoch-0 point, and the experiment holds a chart view of the trade-off per epoch."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from gridsearch._optuna import MLFLOW_RUN_ATTR, TUNE_TRIAL_ATTR
from gridsearch.run import main
from gridsearch.tracking._curves import CHARTS_SECTION
from gridsearch.tracking._tags import (
    CHARTS_VIEW,
    OPTUNA_STUDY_TAG,
    OPTUNA_TRIAL_TAG,
    TRIAL_TAG,
    VIEW_TAG_PREFIX,
)
from tests.gridsearch.test_run import SMOKE
from trainables import names

EPOCHS = 2  # --smoke-test's


@pytest.mark.slow
def test_a_search_links_its_runs_study_and_trials_both_ways(
    tmp_path: Path, mlflow_runs, on_cluster: list[str]
) -> None:
    argv = ["--space", "margin_sweep", *SMOKE, "--num-samples", "2", "--objective", "retrieval",
            "--runs-dir", str(tmp_path), "--experiment", "linked", *on_cluster]  # fmt: skip
    assert main(argv) == 0
    client, runs = mlflow_runs(tmp_path, "linked")
    study = optuna.load_study(
        study_name="linked", storage=f"sqlite:///{tmp_path / 'tune' / 'linked.optuna.db'}"
    )
    assert study.metric_names == [names.BEST_RETRIEVAL]  # not "Objective 0"

    trials = [r for r in runs if r.data.tags.get("search.role") == "trial"]
    assert len(trials) == 2 == len(study.trials)
    for run in trials:
        assert run.data.tags[OPTUNA_STUDY_TAG] == "linked"
        optuna_trial = study.trials[int(run.data.tags[OPTUNA_TRIAL_TAG])]
        assert optuna_trial.user_attrs[TUNE_TRIAL_ATTR] == run.data.tags[TRIAL_TAG]
        assert optuna_trial.user_attrs[MLFLOW_RUN_ATTR] == run.info.run_id
        # the same steps, each epoch's own value: epoch 0 (untrained) to the last; the
        # trial's value is the running best the search selects on, at its last epoch
        own = client.get_metric_history(run.info.run_id, names.PRIMARY_RETRIEVAL)
        logged = {m.step: m.value for m in own}
        assert sorted(logged) == list(range(EPOCHS + 1))
        assert optuna_trial.intermediate_values == pytest.approx(logged)
        best = client.get_metric_history(run.info.run_id, names.BEST_RETRIEVAL)
        assert optuna_trial.value == pytest.approx({m.step: m.value for m in best}[EPOCHS])
        assert optuna_trial.value == pytest.approx(max(logged.values()))

    [parent] = [r for r in runs if r.data.tags.get("search.role") == "search"]
    assert names.BEST_RETRIEVAL in parent.data.metrics
    for key in parent.data.metrics:  # the search's result, at its last epoch, not at 0
        steps = [m.step for m in client.get_metric_history(parent.info.run_id, key)]
        assert steps == [EPOCHS], key

    experiment = client.get_experiment_by_name("linked")
    view = json.loads(experiment.tags[VIEW_TAG_PREFIX + CHARTS_VIEW])
    state = json.loads(view["state"])
    assert [s["name"] for s in state["compareRunSections"]] == [CHARTS_SECTION]
    first = state["compareRunCharts"][0]
    assert (first["selectedXAxisMetricKey"], first["metricKey"]) == (
        names.PRIMARY_RETRIEVAL,
        names.PRIMARY_SEMANTIC,
    )
