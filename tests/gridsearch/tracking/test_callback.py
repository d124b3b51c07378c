"""The tracker's (and the progress') reading of Tune's trials, with real Tune ``Trial``
objects."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from ray.train._internal.storage import StorageContext
from ray.tune.experiment import Trial

from gridsearch._outcome import Failures, failures_of
from gridsearch.progress import ProgressPrinter
from gridsearch.spaces import SPACES
from gridsearch.tracking import TrialTracker, ensure_experiment, start_parent_run
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


@pytest.mark.slow  # it starts the Ray cluster, as the test above (they share it)
def test_a_retried_trial_is_said_in_the_progress_and_on_its_run(
    tmp_path: Path, connected: None
) -> None:
    """Tune retries a trial after a failure (``on_trial_recover``): the progress has a
    RETRY line with the cause, and the trial's run its ``failures`` and ``last_failure``
    tags at once; a failure for a full disk is left to the disk guard, which says it."""
    storage = StorageContext(
        storage_path=str(tmp_path / "storage"), experiment_dir_name="e", trial_dir_name="t"
    )
    trial = Trial("trainable", stub=True, storage=storage, config={"margin": 0.2}, max_failures=2)
    trial.init_local_path()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = ensure_experiment(client, "retried", tmp_path / "artifacts")
    parent = start_parent_run(client, experiment, "retried", {}, {}, {})
    tracker = TrialTracker(uri, experiment, parent, {})
    lines: list[str] = []
    printer = ProgressPrinter(SPACES["margin_sweep"], 2, 2, "dev/r10_mean_best", lines.append)
    tracker.on_trial_start(0, [trial], trial)
    printer.on_trial_start(0, [trial], trial)
    cause = "AttributeError: module 'grounded_packed_rnn_x' has no attribute 'gru_forward'"
    trial.handle_error(RuntimeError(f"Traceback (most recent call last):\n  ...\n{cause}"))
    for callback in (printer, tracker):
        callback.on_trial_recover(0, [trial], trial)
    assert lines[-1].split("] ", 1)[1] == (
        f"RETRY 1/2  {trial.trial_id}  failed ({cause}); run again from its last checkpoint "
        "(failure 1, --max-failures 2)"
    )
    assert tracker.flush(wait_s=30)
    (run,) = client.search_runs([experiment], f"tags.`tune.trial_id` = '{trial.trial_id}'")
    assert run.data.tags["failures"] == "1" and run.data.tags["last_failure"] == cause
    assert failures_of(trial) == Failures(1, cause)

    said = len(lines)
    trial.handle_error(OSError(28, "No space left on device"))
    printer.on_trial_recover(0, [trial], trial)
    assert len(lines) == said  # the disk guard's to say: it stops the search
