"""What clusters do to a search, done for real on a simulated multi-node Ray cluster
(``ray.cluster_utils.Cluster``: a head without CPUs and two one-CPU worker nodes on this
machine), with the real CLI in a subprocess and real MLflow stores, then read back.

Each test says what it breaks; the README's fault table lists the outcomes.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from mlflow.tracking import MlflowClient

ray = pytest.importorskip("ray")
from ray import tune  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from gridsearch._scheduler import make_scheduler  # noqa: E402
from gridsearch.settings import SMOKE_WORLD_IMAGES  # noqa: E402
from gridsearch.tracking import TrialTracker, ensure_experiment, start_parent_run  # noqa: E402
from storage.build import build_synthetic  # noqa: E402
from tests.gridsearch.faults import (  # noqa: E402
    Driver,
    MlflowServer,
    fault_trainable,
    node_running,
)
from tests.gridsearch.test_drivers import Driver as LineDriver  # noqa: E402
from tests.gridsearch.test_fused_edges import (  # noqa: E402
    EPOCHS,
    RETRIEVAL,
    SEARCH,
    _check_members,
    _driver,
    _last_status,
    _replayed_stops,
    _steps,
    _study,
    _summary_counts,
    _trial_runs,
)
from trainables import names  # noqa: E402
from trainables.config import TrainConfig  # noqa: E402
from trainables.data import TrainingData, default_senteval  # noqa: E402
from trainables.loop import Trainer  # noqa: E402
from trainables.semantic import make_semantic  # noqa: E402

pytestmark = pytest.mark.slow
EPOCH_KEYS = (names.PRIMARY_RETRIEVAL, names.PRIMARY_SEMANTIC, "epoch")


@pytest.fixture(scope="module")
def extensions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The torch extensions folder of a home shared by every node and driver (the
    nodes' processes inherit it), empty at first: the first driver builds the C++
    recurrence in it, before Ray; no trial ever does."""
    folder = tmp_path_factory.mktemp("torch_extensions")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCH_EXTENSIONS_DIR", str(folder))
        yield folder


def _builds(extensions: Path) -> list[str]:
    """Every build in ``extensions``: a line each (who, when, how long)."""
    return [
        line
        for log in sorted(extensions.glob("*/builds.log"))
        for line in log.read_text().splitlines()
    ]


@pytest.fixture(scope="module")
def cluster(extensions: Path):
    # no log monitors, as the session's cluster (tests/conftest.py says why)
    head = {"num_cpus": 0, "include_dashboard": False, "include_log_monitor": False}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    for _ in range(2):
        cluster.add_node(num_cpus=1, include_log_monitor=False)
    cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> str:
    store = str(tmp_path_factory.mktemp("world") / "store")
    build_synthetic(store, images=SMOKE_WORLD_IMAGES, seed=0)
    return store


def _search(cluster: Cluster, world: str, runs: Path, experiment: str, *more: str) -> list[str]:
    return [
        "--space",
        "margin_sweep",
        "--smoke-test",
        "--scheduler",
        "fifo",
        "--address",
        cluster.address,
        "--data",
        world,
        "--runs-dir",
        str(runs),
        "--experiment",
        experiment,
        *more,
    ]


def _children(client: MlflowClient, experiment: str) -> list[Any]:
    found = client.get_experiment_by_name(experiment)
    assert found is not None
    runs = client.search_runs([found.experiment_id], max_results=10_000)
    assert not [r for r in runs if r.info.status == "RUNNING"], "a run was left RUNNING"
    assert sum(r.data.tags.get("search.role") == "search" for r in runs) == 1
    return [r for r in runs if r.data.tags.get("search.role") == "trial"]


def _epochs_once(client: MlflowClient, run: Any, epochs: int, keys=EPOCH_KEYS) -> None:
    for key in keys:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        assert sorted(steps) == list(range(epochs + 1)), (key, steps)


def _local_client(runs: Path) -> MlflowClient:
    return MlflowClient(f"sqlite:///{runs / 'mlflow.db'}")


def test_worker_node_killed_mid_trial_while_the_tracking_server_is_away(
    cluster: Cluster, world: str, tmp_path: Path, extensions: Path
) -> None:
    """Two trials at once, one on each worker node. After the first epoch the MLflow
    server dies, and then the node of one of the trials; the server comes back once both
    trials are done. The node's trial resumes from its last checkpoint on the other node and
    every metric equals an uninterrupted run of the plain training loop; training never
    stops for the server, the records wait in the driver, and in the end every epoch is
    in MLflow exactly once and every run is closed with its (proxied) artifacts. The
    trials read the store from its path themselves (``--data-via uri``). They ran on both
    nodes, which share the extensions folder: the C++ recurrence was built once, by a
    driver (this one, if it was the module's first), and by no trial. Three epochs: the
    two after the checkpoint leave the node's removal an epoch to spare before the trial
    could end. (One search where there were two: a node lost, and the server away.)"""
    built_before = _builds(extensions)
    server = MlflowServer(tmp_path / "server")
    server.start()
    try:
        args = _search(
            cluster, world, tmp_path / "runs", "node", "--epochs", "3", "--num-samples", "2",
            "--max-concurrent", "2", "--tracking-uri", server.uri, "--tracking-wait", "240",
            "--data-via", "uri",  # and the trials read the store themselves
        )  # fmt: skip
        driver = Driver(args)
        driver.wait_for("epoch 1/3")
        # the server first, at once, as a lone fault: a write in flight when it dies may
        # be applied and then retried (a metric point twice, seen once when the node's
        # removal came first and took seconds)
        server.stop()
        cluster.remove_node(node_running(cluster.worker_nodes))
        try:
            driver.wait_for("is not answering")
            driver.wait_for("done  ", count=2)  # both trials trained on while it was away
        finally:
            cluster.add_node(num_cpus=1, include_log_monitor=False)  # back to two worker nodes
        server.start()
        assert driver.finish() == 0, driver.text
        assert "is back after" in driver.text
        assert "node has died" in driver.text and driver.text.count(" start ") == 3
        starts = Counter(
            line.split("] start ", 1)[1].split()[1] for line in driver.lines if "] start " in line
        )
        (resumed,) = [trial_id for trial_id, count in starts.items() if count == 2]
        # the retry said as it happened, in the summary's count and line, and in MLflow;
        # so are the writes that waited for the server
        assert f"RETRY 1/2  {resumed}  failed (" in driver.text or (
            f"RETRY 2/2  {resumed}  failed (" in driver.text
        ), driver.text
        assert "2 trials: 1 finished, 1 finished after a retry" in driver.text, driver.text
        assert f"  retried {resumed}: failed once (" in driver.text
        assert f"MLflow at {server.uri}: " in driver.text and " waited for the store" in driver.text
        built = _builds(extensions)
        if built_before:  # an earlier driver of this module built it: found, not a word
            assert built == built_before and "building the C++" not in driver.text
        else:  # this driver built it, before any trial, and said so
            assert len(built) == 1 and f"pid {driver.process.pid} " in built[0], built
            # the line that starts the build, once (not the phase's "still building" lines)
            assert driver.text.count("] building the C++ recurrence") == 1, driver.text
            assert driver.text.index("built in") < driver.text.index(" start ")

        client = MlflowClient(server.uri)
        runs = _children(client, "node")
        assert len(runs) == 2
        for run in runs:
            assert run.info.status == "FINISHED"
            _epochs_once(client, run, epochs=3)
            artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
            assert {"config.json", "tradeoff.png", "ensemble.pt"} <= artifacts
        (run,) = [r for r in runs if r.data.tags["tune.trial_id"] == resumed]
        assert run.data.tags["failures"] == "1" and run.data.tags["last_failure"]
        assert all("failures" not in r.data.tags for r in runs if r is not run)
        found = client.get_experiment_by_name("node")
        assert found is not None
        (parent,) = client.search_runs([found.experiment_id], "tags.`search.role` = 'search'")
        assert parent.data.tags["retried_trials"] == "1"
        assert " waited for the store" in parent.data.tags["tracking_retries"]
        config_file = client.download_artifacts(run.info.run_id, "config.json", str(tmp_path))
        keys = (names.PRIMARY_RETRIEVAL, names.PRIMARY_SEMANTIC, names.LOSS)
        history = {key: client.get_metric_history(run.info.run_id, key) for key in keys}
    finally:
        server.stop()
    config = TrainConfig.from_dict(json.loads(Path(config_file).read_text()))
    data = TrainingData.from_store(world)
    semantic = make_semantic(default_senteval(world), config.evaluation, config.run)
    straight = list(Trainer(config, data, semantic).run())
    for key in keys:
        logged = {m.step: m.value for m in history[key]}
        expected = {int(m["epoch"]): m[key] for m in straight if key in m}
        assert logged == pytest.approx(expected, rel=1e-5, abs=1e-6), key


def test_driver_killed_then_resumed(
    cluster: Cluster, world: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """SIGKILL of the driver with one trial done and others running; ``--resume`` ends
    with exactly the requested trials, no duplicate, nothing RUNNING, in MLflow and in
    the Optuna study. The Tune experiment lives behind a pyarrow filesystem URI
    (``file://`` here, the code path of ``s3://`` and ``gs://``). Only the killed driver
    is a process of its own; the resume, which nothing signals, runs in this one."""
    args = _search(
        cluster, world, tmp_path, "killed", "--epochs", "2", "--num-samples", "3",
        "--max-concurrent", "2", "--storage-path", (tmp_path / "shared").as_uri(),
    )  # fmt: skip
    driver = Driver(args)
    driver.wait_for("done ")  # a trial has finished; the next ones are running
    driver.process.kill()
    driver.finish()

    code, out = _driver(
        capfd, "--experiment", "killed", "--resume", "--runs-dir", str(tmp_path), "--address",
        cluster.address,
    )  # fmt: skip
    assert code == 0, out
    assert "3 trials: 3 finished" in out
    assert (tmp_path / "shared" / "killed").is_dir() and not (tmp_path / "tune").exists()

    client = _local_client(tmp_path)
    runs = _children(client, "killed")
    outcomes = Counter(r.data.tags["outcome"] for r in runs)
    assert outcomes["finished"] == 3 and set(outcomes) <= {"finished", "abandoned"}, outcomes
    assert len({r.data.tags["tune.trial_id"] for r in runs}) == len(runs)
    for run in runs:
        if run.data.tags["outcome"] == "finished":
            _epochs_once(client, run, epochs=2)

    study = optuna.load_study(
        study_name="killed", storage=f"sqlite:///{tmp_path / 'optuna' / 'killed.optuna.db'}"
    )
    numbers = [t.number for t in study.trials]
    assert len(numbers) == len(set(numbers))
    states = Counter(t.state for t in study.trials)
    assert states[optuna.trial.TrialState.COMPLETE] == 3
    assert states[optuna.trial.TrialState.RUNNING] == 0


def test_diverging_and_raising_trials_fail_and_the_search_goes_on(
    cluster: Cluster, world: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tune (2.60) copies the driver's files to the storage path every 10 s (its "auto"
    # period, TUNE_GLOBAL_CHECKPOINT_S), and a retried trial's restart copies its
    # result.json back from there over the driver's own: the reports since the last copy
    # leave Tune's results. The NaN trial fails within milliseconds of its epoch 0; when a
    # copy fell between its start and that report and none between the report and the
    # retry's start (a few seconds), the reconcile below found 5 epochs where MLflow held
    # 6. A copy every 0.5 s leaves no such window (a retry's new process takes longer to
    # start). (At every step of Tune's loop instead, the copies cost about 10 CPU-s here.)
    # A search's own --resume meets the same loss only where MLflow was away for the whole
    # of a retried trial (docs/faults.md).
    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "0.5")
    # One trial at a time, a finished trial's process taken by the next as in a search
    # (reuse_actors; Tune ends a failed trial's process): "none" runs between the NaN trial
    # and the raising one, which takes its process: four trial processes where there were
    # five (a process is about 4 CPU-s of imports), and a trial still runs after one failed.
    data = TrainingData.from_store(world)
    features = np.full_like(data.train.features, np.nan)
    poisoned = dataclasses.replace(data, train=dataclasses.replace(data.train, features=features))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = ensure_experiment(client, "faults", tmp_path / "artifacts")
    parent = start_parent_run(client, experiment, "faults", {}, {}, {})
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        tuner = tune.Tuner(
            tune.with_resources(
                tune.with_parameters(fault_trainable, data=data, poisoned=poisoned), {"cpu": 1}
            ),
            param_space={
                "fault": tune.grid_search(["nan", "none", "raise"]),
                **dict(hidden_size=8, batch_size=8, epochs=2, device="cpu", threads=1),
            },
            tune_config=tune.TuneConfig(max_concurrent_trials=1, reuse_actors=True),
            run_config=tune.RunConfig(
                storage_path=str(tmp_path / "tune"),
                name="faults",
                verbose=0,
                callbacks=[TrialTracker(uri, experiment, parent, {})],
                failure_config=tune.FailureConfig(max_failures=1),
            ),
        )
        results = tuner.fit()
    finally:
        ray.shutdown()
    assert results.num_errors == 2 and results.num_terminated == 1
    client.set_terminated(parent)

    runs = {r.data.params["search.fault"]: r for r in _children(client, "faults")}
    assert runs["none"].info.status == "FINISHED"
    no_semantic = (names.PRIMARY_RETRIEVAL, "epoch")  # these trials have no semantic sets
    _epochs_once(client, runs["none"], epochs=2, keys=no_semantic)
    for fault, expected in (("nan", "the loss became nan"), ("raise", "injected failure")):
        run = runs[fault]
        assert run.info.status == "FAILED" and run.data.tags["outcome"] == "failed"
        assert expected in run.data.tags["error"], run.data.tags["error"][-500:]
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "epoch")]
        assert sorted(steps) == sorted(set(steps))  # retried, yet each epoch once

    # Had MLflow been away for the whole search, --resume would rebuild all of this from
    # Tune's results alone: reconcile into an empty experiment and compare.
    again = ensure_experiment(client, "faults-again", tmp_path / "artifacts")
    parent = start_parent_run(client, again, "faults-again", {}, {}, {})
    report = TrialTracker(uri, again, parent, {}).reconcile(results, complete=True)
    client.set_terminated(parent)
    assert report.closed == 3 and report.abandoned == 0
    rebuilt = {r.data.params["search.fault"]: r for r in _children(client, "faults-again")}
    assert report.epochs == sum(
        len(client.get_metric_history(r.info.run_id, "epoch")) for r in runs.values()
    )
    for fault, run in rebuilt.items():
        assert run.info.status == runs[fault].info.status
        assert run.data.metrics == runs[fault].data.metrics
        for key in no_semantic:
            assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)] == [
                (m.step, m.value) for m in client.get_metric_history(runs[fault].info.run_id, key)
            ]
    assert "ensemble.pt" in {a.path for a in client.list_artifacts(rebuilt["none"].info.run_id)}


def test_load_16_trials_8_at_a_time(
    cluster: Cluster, world: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """16 short trials, 8 at once on the cluster's two CPUs (two waves of results
    arriving together); every run and every metric point Tune received is in MLflow, each
    exactly once. Nothing signals the driver: it runs in this process."""
    space = tmp_path / "load.yaml"
    space.write_text(  # short trials: no semantic evaluation, few steps per epoch
        "name: load\nfixed: {semantic_every: 0, batch_size: 32}\n"
        "params:\n  margin: {type: float, low: 0.1, high: 0.3}\n"
    )
    args = _search(
        cluster, world, tmp_path, "load", "--epochs", "1", "--num-samples", "16",
        "--max-concurrent", "8", "--cpus-per-trial", "0.25",
    )  # fmt: skip
    args[args.index("--space") : args.index("--space") + 2] = ["--space-file", str(space)]
    code, out = _driver(capfd, *args)
    assert code == 0, out
    assert "16 trials: 16 finished" in out

    client = _local_client(tmp_path)
    runs = _children(client, "load")
    assert len(runs) == 16 and all(r.info.status == "FINISHED" for r in runs)
    assert len({r.data.tags["tune.trial_id"] for r in runs}) == 16

    expected = 0
    for trial_dir in (tmp_path / "tune" / "load").iterdir():
        if (trial_dir / "result.json").exists():
            for line in (trial_dir / "result.json").read_text().splitlines():
                result = json.loads(line)
                expected += 1 + sum(  # "epoch" and every logged metric of the epoch
                    k.startswith(("dev/", "test/", "train/", "time/", "ensemble/"))
                    and isinstance(v, (int, float))
                    for k, v in result.items()
                )
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        ids = tuple(r.info.run_id for r in runs)
        marks = ",".join("?" * len(ids))
        points = db.execute(
            f"SELECT run_uuid, key, step, COUNT(*) FROM metrics WHERE run_uuid IN ({marks}) "
            "GROUP BY run_uuid, key, step",
            ids,
        ).fetchall()
    assert all(count == 1 for *_, count in points)  # no point twice
    assert len(points) == expected > 16 * 2 * 5


def test_a_fused_trial_on_a_worker_node_stops_its_members_and_resumes_them_as_they_ended(
    cluster: Cluster, world: str, tmp_path: Path, mlflow_runs, capfd: pytest.CaptureFixture[str]
) -> None:
    """Two configurations in one fused trial under ASHA, on a worker node (the head has
    no CPUs): the member below the median at the rung (epoch 1) is stopped there, told
    through the search's signals actor, never through the driver's folder; Ctrl+C after
    epoch 1, then --resume finishes it with a new actor: the restored searcher tells the
    stop again, so the stopped member stays stopped at its rung, as Optuna was told,
    though the trial resumes from an earlier checkpoint. The interrupted driver is a
    process of its own; the resume, which nothing signals, runs in this one. Two
    (the fewest: each one more is one more model trained), at seed 2: on this world the
    second is below the first at the rung (dev R@10 best 80.0 against 85.8), so ASHA
    stops it. (At seed 0, of two to five configurations, all members but a fifth end
    epoch 1 tied at the untrained model's 75.8, and ASHA stops none.)"""
    runs = tmp_path / "runs"
    on_cluster = ["--address", cluster.address, "--data", world]
    first = LineDriver(*SEARCH, "--scheduler", "asha", "--num-samples", "2", "--fuse", "2",
                       "--seed", "2", "--runs-dir", str(runs), "--experiment", "x",
                       *on_cluster)  # fmt: skip
    first.wait_for("epoch 1/2")
    first.process.send_signal(signal.SIGINT)
    code, out = first.finish()
    assert code == 130 and "at epoch 1," in out, out  # ASHA's one rung
    _, interrupted = _trial_runs(mlflow_runs, runs, "x")
    assert _summary_counts(out) == Counter(r.data.tags["outcome"] for r in interrupted.values())
    assert "the search stopped (SIGINT) with 2 trial(s) not finished" in out, out
    code, out = _driver(capfd, "--experiment", "x", "--resume", "--runs-dir", str(runs),
                        *on_cluster)  # fmt: skip
    assert code == 0 and "start 1-2/2" in out, out
    assert len(list((runs / "tune" / "x").glob("*/result.json"))) == 1  # the one trial, resumed
    client, members = _trial_runs(mlflow_runs, runs, "x")
    outcomes = _check_members(client, members, _study(runs, "x"), 2)
    assert _summary_counts(out) == Counter(outcomes.values())  # members, as MLflow holds them
    asha = make_scheduler("asha", EPOCHS, 1, RETRIEVAL, "max")
    stopped = _replayed_stops(asha, client, members, [RETRIEVAL])
    assert stopped, "this search's ASHA stops a member at its rung (seeded, deterministic)"
    assert {m for m, o in outcomes.items() if o == "stopped_early"} == stopped
    for member in stopped:  # it trained no further than its rung, before or after
        assert _steps(client, members[member]) == [0, 1]
    assert _last_status(out).startswith("2 of 2 trials done, 0 running, 0 left")
    assert f"{len(stopped)} stopped early" in out  # the fused trial's end line


def test_the_signals_actor_lives_on_the_drivers_node(cluster: Cluster) -> None:
    """It needs no CPU, so Ray could place it on any node: on a worker node that left the
    cluster it would take every trial's stops along (and fail its trials)."""
    from trainables.tune import start_signals

    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    try:
        for _ in range(4):
            actor = start_signals()
            ray.get(actor.progress.remote())
            placed = ray._private.state.actors(actor._actor_id.hex())["Address"]["NodeID"]
            assert placed == ray.get_runtime_context().get_node_id() == cluster.head_node.node_id
    finally:
        ray.shutdown()
