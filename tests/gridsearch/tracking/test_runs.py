"""A search's trial runs in a real MLflow sqlite store, without Tune: one run per trial,
found again after a restart, each epoch once, closed once with its outcome."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from gridsearch._outcome import Outcome
from gridsearch._space import split_trial_config
from gridsearch.tracking._reconcile import epoch_metrics
from gridsearch.tracking._runs import TrialRuns
from gridsearch.tracking._store import ensure_experiment, start_parent_run
from gridsearch.tracking._tags import OUTCOME_TAG, PARENT_TAG, ROLE_TAG, TRIAL_TAG
from trainables import names

CONFIG = {"margin": 0.3, "hidden_size": 8, "variant": "gru-8-attention"}


def _search(tmp_path: Path) -> tuple[MlflowClient, str, str]:
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = ensure_experiment(client, "runs", tmp_path / "artifacts")
    parent = start_parent_run(client, experiment, "runs", {"space": "x"}, {}, {"a.json": [1]})
    return client, experiment, parent


def test_one_run_per_trial_each_epoch_once_closed_once(tmp_path: Path) -> None:
    client, experiment, parent = _search(tmp_path)
    runs = TrialRuns(client, experiment, parent, {"space": "x"})
    for epoch in (0, 1, 1, 2):  # a restored trial reports epoch 1 again
        runs.log_epoch("trial_00001", CONFIG, epoch, {names.PRIMARY_RETRIEVAL: 10.0 * epoch})
    run_id = runs.run_of("trial_00001", CONFIG)
    run = client.get_run(run_id)
    assert run.data.tags[PARENT_TAG] == parent and run.data.tags[TRIAL_TAG] == "trial_00001"
    assert run.data.tags[ROLE_TAG] == "trial" and run.data.tags["space"] == "x"
    assert run.info.run_name == "trial-00001"
    assert run.data.params["margin"] == "0.3" and run.data.params["search.variant"] == (
        "gru-8-attention"
    )
    history = client.get_metric_history(run_id, names.PRIMARY_RETRIEVAL)
    assert sorted(m.step for m in history) == [0, 1, 2]

    again = TrialRuns(client, experiment, parent, {})  # after a restart
    assert again.run_of("trial_00001", CONFIG) == run_id
    for epoch in (0, 1, 2):  # found in MLflow: none is logged twice
        assert not again.log_epoch("trial_00001", CONFIG, epoch, {names.PRIMARY_RETRIEVAL: 99.0})

    again.close("trial_00001", CONFIG, Outcome.STOPPED_EARLY, checkpoint=None)
    again.close("trial_00001", CONFIG, Outcome.FAILED, checkpoint=None, error="late")  # no-op
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags[OUTCOME_TAG] == "stopped_early"
    assert "error" not in run.data.tags
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert artifacts == {"config.json", "tradeoff.png"}  # no ensemble: it did not finish

    again.reopen("trial_00001", CONFIG)
    assert client.get_run(run_id).info.status == "RUNNING"


def test_failed_runs_keep_the_end_of_their_error_and_unknown_ones_are_abandoned(
    tmp_path: Path,
) -> None:
    client, experiment, parent = _search(tmp_path)
    runs = TrialRuns(client, experiment, parent, {})
    runs.close("a", {"margin": 0.1}, Outcome.FAILED, None, "x" * 6000 + "why")
    run = client.get_run(runs.run_of("a", {"margin": 0.1}))
    assert run.info.status == "FAILED" and run.data.tags["error"].endswith("why")
    assert len(run.data.tags["error"]) == 5000
    runs.log_epoch("lost", {"margin": 0.2}, 0, {})
    runs.log_epoch("kept", {"margin": 0.3}, 0, {})
    assert runs.abandon_unknown({"kept"}) == 1
    lost = client.get_run(runs.run_of("lost", {"margin": 0.2}))
    assert lost.info.status == "KILLED" and lost.data.tags[OUTCOME_TAG] == "abandoned"
    assert client.get_run(runs.run_of("kept", {"margin": 0.3})).info.status == "RUNNING"


def test_split_trial_config_and_epoch_metrics() -> None:
    config, helpers = split_trial_config(CONFIG)
    assert config.margin == 0.3 and helpers == {"variant": "gru-8-attention"}
    reported = {"epoch": 1, "dev/r10_mean": 3, "test/x": float("nan"), "done": True, "pid": 7}
    assert epoch_metrics(reported) == {"dev/r10_mean": 3.0, "test/x": reported["test/x"]}
    assert epoch_metrics(reported, from_table=True) == {"dev/r10_mean": 3.0}


class _AnswerLost:
    """A real client whose next ``log_batch`` is applied and then fails, as when the
    tracking server dies after writing a request and before answering it."""

    def __init__(self, client: MlflowClient) -> None:
        self.client, self.lose_next = client, False

    def __getattr__(self, name: str) -> object:
        return getattr(self.client, name)

    def log_batch(self, *args: object, **kwargs: object) -> None:
        self.client.log_batch(*args, **kwargs)
        if self.lose_next:
            self.lose_next = False
            raise MlflowException("the connection was reset before the answer")


def test_a_write_applied_before_its_failure_is_not_written_twice(tmp_path: Path) -> None:
    """An epoch's report, or a late test battery, that MLflow applied though its call
    failed is not logged again when the driver retries it: each step once."""
    client, experiment, parent = _search(tmp_path)
    lossy = _AnswerLost(client)
    runs = TrialRuns(lossy, experiment, parent, {})  # type: ignore[arg-type]
    late = {names.key(names.TEST, "semantic"): 0.5}
    run_id = runs.run_of("trial_00001", CONFIG)  # created (its parameters: a log_batch too)
    for epoch in (0, 1):
        lossy.lose_next = True
        with pytest.raises(MlflowException):
            runs.log_epoch("trial_00001", CONFIG, epoch, {names.PRIMARY_RETRIEVAL: 1.0})
        assert not runs.log_epoch("trial_00001", CONFIG, epoch, {names.PRIMARY_RETRIEVAL: 1.0})
    lossy.lose_next = True
    with pytest.raises(MlflowException):
        runs.log_late("trial_00001", CONFIG, 0, late)
    assert not runs.log_late("trial_00001", CONFIG, 0, late)
    assert runs.log_epoch("trial_00001", CONFIG, 2, {names.PRIMARY_RETRIEVAL: 1.0})
    for key, steps in (
        (names.PRIMARY_RETRIEVAL, [0, 1, 2]),
        (names.key(names.TEST, "semantic"), [0]),
    ):
        assert sorted(m.step for m in client.get_metric_history(run_id, key)) == steps, key
