"""The tracker's reading of Tune's trials, with real Tune ``Trial`` objects."""

from __future__ import annotations

from pathlib import Path

import pytest
from ray.train._internal.storage import StorageContext
from ray.tune.experiment import Trial

from gridsearch.tracking._callback import _trial_error


@pytest.mark.slow  # 5 s or more in the fast tier (BENCHMARKS.md): it starts the Ray cluster
def test_a_failed_trial_s_error_is_read_before_tune_copies_it_to_the_storage_path(
    tmp_path: Path, connected: None
) -> None:
    """Tune writes a failed trial's ``error.txt`` into the driver's folder at once and
    copies it to the storage path every few seconds: read right after the failure, the
    storage path has none yet, and the error is the driver's copy, not "the trial
    failed"."""
    storage = StorageContext(
        storage_path=str(tmp_path / "storage"), experiment_dir_name="e", trial_dir_name="t"
    )
    trial = Trial("trainable", stub=True, storage=storage)
    trial.init_local_path()
    assert _trial_error(trial) == "the trial failed"  # nothing written yet
    trial.handle_error(RuntimeError("the loss became nan at epoch 3"))
    assert trial.get_error() is None  # not on the storage path yet
    assert "the loss became nan at epoch 3" in _trial_error(trial)
