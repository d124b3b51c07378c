"""Helpers for reading back what a search recorded, through MLflow's own client."""

from __future__ import annotations

from pathlib import Path

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
