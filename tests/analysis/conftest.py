"""One real search (``--smoke-test`` on the embedded world, through Ray Tune, Optuna and
MLflow), run once per session and shared by the slow tests of this package."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest

SPACE_FILE = Path(__file__).with_name("snapshot_space.yaml")


class RealSearch(NamedTuple):
    runs_dir: Path
    experiment: str

    @property
    def tracking_uri(self) -> str:
        return f"sqlite:///{self.runs_dir / 'mlflow.db'}"


@pytest.fixture(scope="session")
def real_search(tmp_path_factory: pytest.TempPathFactory, on_cluster: list[str]) -> RealSearch:
    """Four trials over margin (continuous) and rnn_type (categorical), objective both;
    the space takes a snapshot every epoch so the 2-epoch trials keep ensemble weights.
    One at a time: one reused trial process trains them all, not two."""
    from gridsearch.run import main

    runs_dir = tmp_path_factory.mktemp("search")
    argv = [
        "--space-file", str(SPACE_FILE),
        "--smoke-test", "--no-dashboard", "--scheduler", "fifo", "--objective", "both",
        "--num-samples", "4", "--max-concurrent", "1", "--runs-dir", str(runs_dir),
        "--experiment", "analysis",
        *on_cluster,
    ]  # fmt: skip
    assert main(argv) == 0
    return RealSearch(runs_dir, "analysis")
