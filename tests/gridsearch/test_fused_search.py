"""A search with ``--seeds-per-config 2`` trains each trial's seeds as one fused model
(``trainables.seeds``; ``GROUNDED_FUSED_SEEDS=fused``, since on a CPU the default
trains them one after the other), through real Ray, MLflow and Optuna, and records what the same
search records with the seeds trained one after the other
(``GROUNDED_FUSED_SEEDS=sequential`` in the trials' environment): the same metric keys
at the same steps, the same values to float32 rounding; each epoch's Tune result says
whether the seeds were fused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.tolerances import REORDERED
from trainables import names
from trainables.seeds import FUSED_SEEDS_ENV
from trainables.tune import SEEDS_FUSED

F32 = REORDERED[torch.float32]


def _search(runs_dir: Path, experiment: str, mode: str) -> None:
    """The search in a subprocess that starts its own Ray, whose trials inherit ``mode``
    from the environment (a joined cluster's trials would not)."""
    args = [sys.executable, "-m", "gridsearch.run", "--space", "margin_sweep", "--smoke-test",
            "--no-dashboard", "--scheduler", "fifo", "--runs-dir", str(runs_dir),
            "--experiment", experiment, "--num-samples", "1", "--seeds-per-config", "2",
            "--quiet"]  # fmt: skip
    env = {**os.environ, FUSED_SEEDS_ENV: mode}
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 trials: 1 finished" in done.stdout


def _tune_results(runs_dir: Path, experiment: str) -> list[dict[str, float]]:
    (path,) = (runs_dir / "tune" / experiment).glob("*/result.json")
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_a_search_fuses_its_seeds_and_records_what_it_records_without(
    tmp_path: Path, mlflow_runs
) -> None:
    _search(tmp_path, "fused", "fused")
    _search(tmp_path, "alone", "sequential")
    assert [r[SEEDS_FUSED] for r in _tune_results(tmp_path, "fused")] == [1, 1, 1]
    assert [r[SEEDS_FUSED] for r in _tune_results(tmp_path, "alone")] == [0, 0, 0]
    trials = {}
    for experiment in ("fused", "alone"):
        client, runs = mlflow_runs(tmp_path, experiment)
        (trial,) = [r for r in runs if r.data.tags.get("search.role") == "trial"]
        assert trial.info.status == "FINISHED"
        trials[experiment] = trial
    fused, alone = trials["fused"], trials["alone"]
    assert fused.data.params == alone.data.params  # the same configuration, the same seed
    assert sorted(fused.data.metrics) == sorted(alone.data.metrics)
    assert names.spread(names.BEST_RETRIEVAL) in fused.data.metrics
    assert names.key(names.TEST, "semantic") in fused.data.metrics
    for key in (names.LOSS, names.PRIMARY_RETRIEVAL, names.key(names.TEST, "semantic")):
        histories = [
            [(m.step, m.value) for m in client.get_metric_history(t.info.run_id, key)]
            for t in (fused, alone)
        ]
        assert [s for s, _ in histories[0]] == [s for s, _ in histories[1]], key
        for (_, got), (_, want) in zip(*histories, strict=True):
            assert got == pytest.approx(want, rel=F32.rtol, abs=F32.atol), key
