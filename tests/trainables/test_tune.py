"""The one Tune trainable (``trainables.tune.trial``) on the session's real Ray cluster: a
lone group and a fused one through the same function, each reporting every epoch with a
checkpoint and resuming from it after a crash as if it had not stopped; a member stopped
through the signals actor leaves, and ends as it was stopped."""

from __future__ import annotations

import functools
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

SMALL = dict(
    hidden_size=8,
    batch_size=8,
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


def _flaky(config: dict[str, Any], data: TrainingData, marker: str, **more: Any) -> None:
    """The real trainable; its first attempt dies after epoch 1, instead of reporting
    epoch 2: the report of epoch 1 had a whole epoch to reach the driver (raising right
    after a report races Tune's delivery of it, and a loaded machine loses that race).
    Every epoch reported, by either attempt, is a line of ``MARKER.reported``."""
    import ray.tune as ray_tune

    real_report = ray_tune.report

    def report(metrics: dict[str, Any], checkpoint: Any = None) -> None:
        if metrics.get("epoch") == 2 and not Path(marker).exists():
            Path(marker).touch()
            raise RuntimeError("injected failure after epoch 1")
        real_report(metrics, checkpoint=checkpoint)
        with open(f"{marker}.reported", "a") as reported:
            reported.write(f"{int(metrics['epoch'])}\n")

    ray_tune.report = report
    try:
        trial(config, data, **more)
    finally:
        ray_tune.report = real_report


def _fit(trainable: Any, config: dict, tmp_path: Path, name: str, max_failures: int = 0) -> Any:
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space=config,
        run_config=tune.RunConfig(
            storage_path=str(tmp_path),
            name=name,
            verbose=0,
            failure_config=tune.FailureConfig(max_failures=max_failures),
        ),
    )
    return tuner.fit()[0]


def _measured(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if "test/" in k or "dev/" in k or "loss" in k}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("config", "seeds", "fused"), [(LONE, 1, 0), (FUSED, 2, 1)],
    ids=["lone", "fused-two-members-at-two-seeds"],
)  # fmt: skip
def test_a_group_reports_every_epoch_and_resumes_from_its_checkpoint(
    local_ray: None, tiny_world: Path, tmp_path: Path, config: dict, seeds: int, fused: int
) -> None:
    data = TrainingData.from_store(str(tiny_world))
    trainable = functools.partial(trial, seeds_per_config=seeds)
    straight = _fit(tune.with_parameters(trainable, data=data), config, tmp_path, "straight")
    assert straight.error is None and straight.checkpoint is not None
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

    marker = tmp_path / "crashed"
    resumed = _fit(
        tune.with_parameters(_flaky, data=data, marker=str(marker), seeds_per_config=seeds),
        config, tmp_path, "resumed", max_failures=1,
    )  # fmt: skip
    assert marker.exists() and resumed.error is None
    # continued from its checkpoint after epoch 1, not trained again from the start. Read
    # from the trainable, not from Tune's result.json: a restarted trial's copy is the one
    # last synced to the storage path, which can lack epoch 1 on a loaded machine
    reported = Path(f"{marker}.reported").read_text().split()
    assert reported == ["0", "1", "2", "3"]
    assert resumed.metrics_dataframe["epoch"].tolist()[-2:] == [2, 3]
    assert _measured(resumed.metrics) == pytest.approx(_measured(straight.metrics))


@pytest.mark.slow
def test_a_member_stopped_through_the_signals_actor_leaves_its_group(
    local_ray: None, tiny_world: Path, tmp_path: Path
) -> None:
    """The driver's searcher stops member 1 after epoch 1 (told before the trial starts,
    as a resumed search tells its restored stops): it reports epochs 0 and 1 and leaves;
    member 0 trains to its end."""
    data = TrainingData.from_store(str(tiny_world))
    signals = start_signals()

    def stopped(config: dict[str, Any], data: TrainingData, signals: Any) -> None:
        trial_id = tune.get_context().get_trial_id()
        ray.get(signals.stop.remote(trial_id, 1, 1))
        trial(config, data, signals=signals)

    trainable = tune.with_parameters(stopped, data=data, signals=signals)
    result = _fit(trainable, FUSED, tmp_path, "stop")
    assert result.error is None
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
