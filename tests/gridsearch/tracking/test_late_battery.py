"""The test battery computed in the background (``trainables.loop``) reaches MLflow at the
epoch it belongs to: its metrics of epoch e come with the report of epoch e + 1 as
``late/...`` keys, and both the tracking callback and ``reconcile`` (from Tune's table)
log them at step e, once. So MLflow holds the same metrics at the same steps as when
every report held its own battery."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from gridsearch.tracking import TrialTracker
from gridsearch.tracking._store import ensure_experiment, start_parent_run
from trainables import names
from trainables.config import TrainConfig
from trainables.data import TrainingData, default_senteval
from trainables.loop import Trainer
from trainables.relatedness import RelatednessProtocol
from trainables.semantic import make_semantic

CONFIG = dict(
    hidden_size=8,
    batch_size=8,
    epochs=2,
    snapshot_interval=1,
    device="cpu",
    threads=1,
    semantic_every=1,
)


def _reports(world: Path, own_reports: bool) -> list[dict[str, float]]:
    """A run's reports, each battery in its own epoch's report where ``own_reports``
    (every epoch in ``complete_at``), else as the Trainer delivers it by default."""
    config = TrainConfig(**CONFIG)
    semantic = make_semantic(default_senteval(str(world)), config.evaluation, config.run)
    assert semantic is not None
    semantic.test.protocol = RelatednessProtocol(max_epoch=0)
    complete_at = range(config.epochs + 1) if own_reports else ()
    data = TrainingData.from_store(str(world))
    return list(Trainer(config, data, semantic, complete_at=complete_at).run())


def _recorded(client: MlflowClient, run_id: str) -> dict[str, list[tuple[int, float]]]:
    """Every metric's (step, value) history, but those measuring speed."""
    keys = [
        k
        for k in client.get_run(run_id).data.metrics
        if not k.startswith("time/") and k != names.CAPTIONS_PER_S
    ]
    return {
        k: sorted((m.step, m.value) for m in client.get_metric_history(run_id, k)) for k in keys
    }


@pytest.mark.slow  # 5 s or more in the fast tier (BENCHMARKS.md)
def test_a_late_battery_is_logged_at_its_own_epoch_by_the_tracker_and_by_reconcile(
    tiny_world: Path, tmp_path: Path
) -> None:
    background, in_place = _reports(tiny_world, False), _reports(tiny_world, True)
    assert names.LATE_EPOCH in background[1] and names.LATE_EPOCH not in in_place[1]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = ensure_experiment(client, "late", tmp_path / "artifacts")
    parent = start_parent_run(client, experiment, "late", {}, {}, {})
    tracker = TrialTracker(uri, experiment, parent, {})
    for trial_id, reports in (("in_place", in_place), ("background", background)):
        trial = SimpleNamespace(trial_id=trial_id, config=CONFIG)
        for report in [*reports, reports[-1]]:  # a restored trial reports its last again
            tracker.on_trial_result(0, [], trial, dict(report))
    assert tracker.pending == 0
    logged = {
        t: _recorded(client, tracker.runs.run_of(t, CONFIG)) for t in ("in_place", "background")
    }
    assert logged["background"] == logged["in_place"]
    battery = names.key(names.TEST, "semantic")
    assert [step for step, _ in logged["background"][battery]] == [0, 1, 2]

    # Had MLflow been away, reconcile would log the same from Tune's table (a row per
    # report, NaN where a report lacked a column).
    again = ensure_experiment(client, "late-again", tmp_path / "artifacts")
    parent = start_parent_run(client, again, "late-again", {}, {}, {})
    results = [
        SimpleNamespace(
            metrics={**background[-1], "trial_id": "background"},
            config=CONFIG,
            metrics_dataframe=pd.DataFrame(background),
            error=None,
            checkpoint=None,
        )
    ]
    rebuilt = TrialTracker(uri, again, parent, {})
    report = rebuilt.reconcile(results, complete=True)
    assert report.epochs == 3 + 2  # three epochs, two batteries that came late
    run_id = rebuilt.runs.run_of("background", CONFIG)
    assert _recorded(client, run_id) == logged["in_place"]
    assert rebuilt.reconcile(results, complete=True).epochs == 0  # nothing twice

    # A table that ends before the trial did (a stop that came as it ended: Tune's state
    # kept its last result, its result.json not): the last result is logged all the same.
    cut = ensure_experiment(client, "late-cut", tmp_path / "artifacts")
    parent = start_parent_run(client, cut, "late-cut", {}, {}, {})
    results[0].metrics_dataframe = pd.DataFrame(background[:-1])
    rebuilt = TrialTracker(uri, cut, parent, {})
    assert rebuilt.reconcile(results, complete=True).epochs == 3 + 2
    assert _recorded(client, rebuilt.runs.run_of("background", CONFIG)) == logged["in_place"]


def test_trials_report_their_own_battery_where_the_scheduler_may_stop_them() -> None:
    """The driver tells the trainable ASHA's rungs (``complete_at``): a trial stopped
    there could not deliver that epoch's battery with a later report."""
    from gridsearch.driver import stopping_epochs

    space = SimpleNamespace(fixed={})

    def at(scheduler: str, objective: str, **fixed) -> list[int]:
        settings = SimpleNamespace(scheduler=scheduler, objective=objective)
        return stopping_epochs(settings, space, fixed)  # type: ignore[arg-type]

    assert at("asha", "retrieval", epochs=32, cycle_epochs=4) == [4, 8, 16]
    assert at("auto", "both", epochs=4, cycle_epochs=1) == [1, 2]  # Pareto halving
    assert at("fifo", "both", epochs=32, cycle_epochs=4) == []
    assert at("auto", "retrieval", epochs=4, cycle_epochs=1) == []  # auto: FIFO below 8
