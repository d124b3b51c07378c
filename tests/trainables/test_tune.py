"""The Tune trainable on a real local Ray: reports every epoch, checkpoints, resumes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
from ray import tune  # noqa: E402

from trainables import names  # noqa: E402
from trainables.data import TrainingData  # noqa: E402
from trainables.tune import grounded_trainable  # noqa: E402

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
    ray.init(address=ray_address, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def _flaky(config: dict[str, Any], data: TrainingData, marker: str) -> None:
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
        grounded_trainable(config, data)
    finally:
        ray_tune.report = real_report


def _fit(trainable, tmp_path: Path, name: str, max_failures: int = 0):
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
def test_trainable_reports_and_resumes_from_its_checkpoint(
    local_ray: None, tiny_world: Path, tmp_path: Path
) -> None:
    data = TrainingData.from_store(str(tiny_world))
    straight = _fit(tune.with_parameters(grounded_trainable, data=data), tmp_path, "straight")
    assert straight.error is None and straight.checkpoint is not None
    history = straight.metrics_dataframe
    assert history["epoch"].tolist() == [0, 1, 2, 3]
    assert names.key(names.TEST, "r10_mean") in straight.metrics

    marker = tmp_path / "crashed"
    resumed = _fit(
        tune.with_parameters(_flaky, data=data, marker=str(marker)),
        tmp_path,
        "resumed",
        max_failures=1,
    )
    assert marker.exists() and resumed.error is None
    final_straight = {k: v for k, v in straight.metrics.items() if k.startswith("test/")}
    final_resumed = {k: v for k, v in resumed.metrics.items() if k.startswith("test/")}
    assert final_resumed == pytest.approx(final_straight)
