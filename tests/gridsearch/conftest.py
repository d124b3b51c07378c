"""Helpers for reading back what a search recorded, through MLflow's own client, and a
real signals actor for the searcher's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient


@pytest.fixture
def mlflow_runs():
    def read(runs_dir: Path, experiment: str) -> tuple[MlflowClient, list]:
        client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
        found = client.get_experiment_by_name(experiment)
        assert found is not None, f"no MLflow experiment {experiment!r}"
        return client, client.search_runs([found.experiment_id])

    return read


@pytest.fixture
def connected(ray_address: str) -> Iterator[None]:
    """This test process joined to the session's Ray cluster for one test (a search run
    in-process joins it itself, and a process joins one cluster at a time)."""
    import ray

    ray.init(address=ray_address, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture
def signals(connected: None) -> Any:
    """A new ``trainables.tune.TrialSignals`` actor, as a search's driver starts one."""
    from trainables.tune import start_signals

    return start_signals()
