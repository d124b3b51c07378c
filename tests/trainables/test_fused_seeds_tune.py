"""A trial whose seeds train fused resumes from its Tune checkpoint (real local Ray):
the restored attempt continues the fused group from the seeds' saved states and ends
where an attempt that never failed ends."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
from ray import tune  # noqa: E402

from trainables import names  # noqa: E402
from trainables.data import TrainingData  # noqa: E402
from trainables.seeds import FUSED_SEEDS_ENV  # noqa: E402
from trainables.tune import SEEDS_FUSED, grounded_trainable  # noqa: E402

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


@pytest.fixture(scope="module")
def local_ray(ray_address: str):
    ray.init(
        address=ray_address, log_to_driver=False, configure_logging=False,
        # the trials fuse their seeds here too (by default only a GPU does)
        runtime_env={"env_vars": {FUSED_SEEDS_ENV: "fused"}},
    )  # fmt: skip
    yield
    ray.shutdown()


def _flaky(config: dict[str, Any], data: TrainingData, marker: str, seeds: int) -> None:
    """The real trainable; its first attempt dies right after reporting epoch 1."""
    import ray.tune as ray_tune

    real_report = ray_tune.report

    def report(metrics: dict[str, Any], checkpoint: Any = None) -> None:
        real_report(metrics, checkpoint=checkpoint)
        if metrics.get("epoch") == 1 and not Path(marker).exists():
            Path(marker).touch()
            raise RuntimeError("injected failure after epoch 1")

    ray_tune.report = report
    try:
        grounded_trainable(config, data, seeds_per_config=seeds)
    finally:
        ray_tune.report = real_report


def _fit(trainable: Any, tmp_path: Path, name: str, max_failures: int = 0) -> Any:
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space=SMALL,
        run_config=tune.RunConfig(
            storage_path=str(tmp_path),
            name=name,
            verbose=0,
            failure_config=tune.FailureConfig(max_failures=max_failures),
        ),
    )
    return tuner.fit()[0]


@pytest.mark.slow
def test_a_fused_trial_resumes_from_its_checkpoint(
    local_ray: None, tiny_world: Path, tmp_path: Path
) -> None:
    data = TrainingData.from_store(str(tiny_world))
    trainable = functools.partial(grounded_trainable, seeds_per_config=2)
    straight = _fit(tune.with_parameters(trainable, data=data), tmp_path, "straight")
    assert straight.error is None
    assert straight.metrics_dataframe[SEEDS_FUSED].tolist() == [1, 1, 1, 1]
    marker = tmp_path / "crashed"
    resumed = _fit(
        tune.with_parameters(_flaky, data=data, marker=str(marker), seeds=2),
        tmp_path,
        "resumed",
        max_failures=1,
    )
    assert marker.exists() and resumed.error is None
    # continued from its checkpoint after epoch 1, not trained again from the start
    assert resumed.metrics_dataframe["epoch"].tolist() == [0, 1, 2, 3]
    assert resumed.metrics_dataframe[SEEDS_FUSED].tolist() == [1, 1, 1, 1]
    measured = [k for k in straight.metrics if k.startswith(("test/", "dev/", "train/loss"))]
    assert names.spread(names.BEST_RETRIEVAL) in straight.metrics
    assert {k: resumed.metrics[k] for k in measured} == {k: straight.metrics[k] for k in measured}
