"""The one Tune trainable (``trainables.tune.trial``) on the session's real Ray cluster: a
lone group and a fused one through the same function, each reporting every epoch with a
checkpoint and resuming from it after a crash as if it had not stopped; a member stopped
through the signals actor leaves, and ends as it was stopped. All of them trials of one
Tune run, its workers reused as a search reuses them (a new one only after a crash)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
from ray import tune  # noqa: E402

from trainables import names  # noqa: E402
from trainables.data import TrainingData  # noqa: E402
from trainables.tune import (  # noqa: E402
    MEMBERS,
    MEMBERS_FUSED,
    group_configs,
    member_key,
    member_metrics,
    start_signals,
    trial,
)

# batch 32: 15 steps an epoch on the tiny world's 96 training images, not 60
SMALL = dict(
    hidden_size=8,
    batch_size=32,
    epochs=3,
    snapshot_interval=1,
    lr_max=3e-3,
    device="cpu",
    semantic_every=0,
    threads=1,
)
LONE = {MEMBERS: [SMALL]}
FUSED = {MEMBERS: [SMALL, {**SMALL, "margin": 0.3, "seed": 4}]}  # two of one shape: fused


@pytest.fixture(scope="module")
def local_ray(ray_address: str):
    ray.init(address=ray_address, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


# the trials of the one Tune run below: each case's group, its seeds, and what befalls it
CASES = {
    "lone": (LONE, 1, "straight"),
    "lone/crashed": (LONE, 1, "crashed"),
    "fused": (FUSED, 2, "straight"),
    "fused/crashed": (FUSED, 2, "crashed"),
    "stop": (FUSED, 1, "stopped"),
}


def _case(config: dict[str, Any], data: TrainingData, folder: str, signals: Any) -> None:
    """The real trainable as ``CASES[config["case"]]`` says; every attempt a line of
    ``CASE.attempts``, every epoch reported a line of ``CASE.reported`` (by either attempt,
    read from the trainable, not from Tune's result.json: a restarted trial's copy is the
    one last synced to the storage path, which can lack an epoch on a loaded machine).

    - straight: as a search runs it;
    - crashed: its first attempt dies after epoch 1, instead of reporting epoch 2: the
      report of epoch 1 had a whole epoch to reach the driver (raising right after a report
      races Tune's delivery of it, and a loaded machine loses that race);
    - stopped: the driver's searcher stops member 1 after epoch 1, told before the trial
      starts (as a resumed search tells its restored stops)."""
    import ray.tune as ray_tune

    group, seeds, fate = CASES[config["case"]]
    marker = Path(folder) / config["case"].replace("/", "-")
    with open(f"{marker}.attempts", "a") as attempts:
        attempts.write("1\n")
    real_report = ray_tune.report

    def report(metrics: dict[str, Any], checkpoint: Any = None) -> None:
        if fate == "crashed" and metrics.get("epoch") == 2 and not marker.exists():
            marker.touch()
            raise RuntimeError("injected failure after epoch 1")
        real_report(metrics, checkpoint=checkpoint)
        with open(f"{marker}.reported", "a") as reported:
            reported.write(f"{int(metrics['epoch'])}\n")

    if fate == "stopped":
        ray.get(signals.stop.remote(tune.get_context().get_trial_id(), 1, 1))
    ray_tune.report = report
    try:
        trial(group, data, seeds_per_config=seeds, signals=signals if fate == "stopped" else None)
    finally:
        ray_tune.report = real_report


@pytest.fixture(scope="module")
def fitted(
    local_ray: None, tiny_world: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], Path, Any]:
    """Every case of ``CASES`` a trial of one Tune run, which may restart each once, its
    workers reused as a search's are: each case's result, the folder of its marker files
    (``_case``), and the signals actor."""
    folder = tmp_path_factory.mktemp("tune")
    data = TrainingData.from_store(str(tiny_world))
    signals = start_signals()
    tuner = tune.Tuner(
        tune.with_resources(
            tune.with_parameters(_case, data=data, folder=str(folder), signals=signals),
            {"cpu": 1},
        ),
        param_space={"case": tune.grid_search(list(CASES))},
        # as gridsearch.run's searches; one trial at a time: three worker processes (the
        # first, and one after each crash) where two at a time took four, each importing
        # torch and building its first group
        tune_config=tune.TuneConfig(reuse_actors=True, max_concurrent_trials=1),
        run_config=tune.RunConfig(
            storage_path=str(folder), name="cases", verbose=0,
            failure_config=tune.FailureConfig(max_failures=1),
        ),
    )  # fmt: skip
    results = {result.config["case"]: result for result in tuner.fit()}
    assert sorted(results) == sorted(CASES)
    return results, folder, signals


def _lines(folder: Path, case: str, what: str) -> list[str]:
    return (folder / f"{case.replace('/', '-')}.{what}").read_text().split()


def _measured(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if "test/" in k or "dev/" in k or "loss" in k}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "fused"), [("lone", 0), ("fused", 1)], ids=["lone", "fused-two-members-at-two-seeds"]
)
def test_a_group_reports_every_epoch_and_resumes_from_its_checkpoint(
    fitted: tuple[dict[str, Any], Path, Any], case: str, fused: int
) -> None:
    results, folder, _ = fitted
    config, seeds, _ = CASES[case]
    straight = results[case]
    assert straight.error is None and straight.checkpoint is not None
    assert _lines(folder, case, "attempts") == ["1"]  # it ran through, once
    history = straight.metrics_dataframe
    assert history["epoch"].tolist() == [0, 1, 2, 3]
    assert history[MEMBERS_FUSED].tolist() == [fused] * 4  # a CPU fuses only several members
    members = len(config[MEMBERS])
    for member in range(members):  # each member under its own prefix, each epoch
        assert history[member_key(member, "epoch")].tolist() == [0, 1, 2, 3]
        assert member_key(member, names.key(names.TEST, "r10_mean")) in straight.metrics
    if seeds > 1:
        assert member_key(0, names.spread(names.BEST_RETRIEVAL)) in straight.metrics
    # the un-prefixed metrics are a member's own: the one best on the (default) metric
    lead = member_metrics(straight.metrics)[0]
    assert (
        straight.metrics[names.BEST_RETRIEVAL]
        in {member_metrics(straight.metrics)[m][names.BEST_RETRIEVAL] for m in range(members)}
        and lead
    )

    crashed = f"{case}/crashed"
    resumed = results[crashed]
    assert (folder / crashed.replace("/", "-")).exists() and resumed.error is None
    assert _lines(folder, crashed, "attempts") == ["1", "1"]  # restarted once
    # continued from its checkpoint after epoch 1, not trained again from the start
    assert _lines(folder, crashed, "reported") == ["0", "1", "2", "3"]
    assert resumed.metrics_dataframe["epoch"].tolist()[-2:] == [2, 3]
    assert _measured(resumed.metrics) == pytest.approx(_measured(straight.metrics))


@pytest.mark.slow
def test_a_member_stopped_through_the_signals_actor_leaves_its_group(
    fitted: tuple[dict[str, Any], Path, Any],
) -> None:
    """The driver's searcher stops member 1 after epoch 1 (told before the trial starts,
    as a resumed search tells its restored stops): it reports epochs 0 and 1 and leaves;
    member 0 trains to its end."""
    results, folder, signals = fitted
    result = results["stop"]
    assert result.error is None
    assert _lines(folder, "stop", "attempts") == ["1"]
    frame = result.metrics_dataframe
    assert frame[member_key(0, "epoch")].tolist() == [0, 1, 2, 3]
    assert frame[member_key(1, "epoch")].dropna().tolist() == [0, 1]
    finished = member_key(1, names.FINISHED)
    assert finished not in frame or frame[finished].isna().all()  # it never finished
    progress = ray.get(signals.progress.remote())
    assert set(progress) <= {result.metrics["trial_id"]}  # told by this trial only, if at all


def test_a_config_written_before_trials_were_groups_is_a_group_of_one() -> None:
    assert group_configs(SMALL) == [SMALL] and group_configs(FUSED) == FUSED[MEMBERS]
    result = {member_key(0, "dev/r10_mean"): 1.0, member_key(3, "epoch"): 2, "epoch": 2, "x/y": 1}
    assert member_metrics(result) == {0: {"dev/r10_mean": 1.0}, 3: {"epoch": 2}}
    assert member_metrics({"epoch": 1, "dev/r10_mean": 2.0}) == {
        0: {"epoch": 1, "dev/r10_mean": 2.0}
    }
