"""The live progress display: k of N trials, the best so far (dev selection metric) with
what it tried, elapsed and an estimate, within-epoch progress from the trainable's side
channel, start lines that name only what a trial tried; and the libraries' noise kept
out. Driven with real Tune ``Trial`` objects and a stepped clock, and once through a real
smoke search on a real local Ray."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import ray
from ray.tune.experiment import Trial
from ray.tune.result import SHOULD_CHECKPOINT

from gridsearch._voice import QUIET_S, clock_text
from gridsearch.progress import ProgressPrinter, quiet_libraries, shown_keys
from gridsearch.spaces import SPACES
from trainables import names

RETRIEVAL = names.selectable(names.BEST_RETRIEVAL)
SEMANTIC = names.selectable(names.BEST_SEMANTIC)


class Clock:
    """Seconds that the test moves on."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _trial(trial_id: str, **config: object) -> Trial:
    """A lone trial: a group of one (its config as a search begun before trials were
    groups wrote it; the printer reads both forms alike)."""
    return Trial("trial", config=dict(config), trial_id=trial_id, stub=True)


def _report(trial: Trial, epoch: int, r10: float, finished: bool = False) -> dict:
    result = {"epoch": epoch, names.PRIMARY_RETRIEVAL: r10, RETRIEVAL: r10}
    if finished:
        result[names.FINISHED] = 80.0
    trial.update_last_result(result)
    return result


@pytest.mark.slow  # 5 s or more in the fast tier (BENCHMARKS.md)
def test_status_line_counts_trials_names_the_best_and_estimates(signals: Any) -> None:
    lines: list[str] = []
    clock = Clock()
    printer = ProgressPrinter(
        SPACES["margin_sweep"],
        4,
        2,
        RETRIEVAL,
        lines.append,
        signals=signals,
        clock=clock,
        ask_wait_s=30.0,  # the actor answers in time, however busy the machine
    )
    first, second, third = _trial("aaa", margin=0.1625), _trial("bbb", margin=0.3), _trial("ccc")
    trials = [first, second, third]
    printer.on_step_end(0, trials)  # before any work: the estimate's starting point
    for trial in (first, second):
        trial.set_status(Trial.RUNNING)
        printer.on_trial_start(0, trials, trial)
    assert lines[-2:] == [
        "[   0:00] start 1/4  aaa  margin=0.1625",
        "[   0:00] start 2/4  bbb  margin=0.3",
    ]
    clock.now += 40
    for epoch, r10 in enumerate((50.0, 62.5, 61.0)):
        printer.on_trial_result(0, trials, first, _report(first, epoch, r10, finished=epoch == 2))
    assert lines[-1] == "[   0:40]       1/4  aaa  epoch 2/2  dev R@10 mean 61.0"
    printer.on_trial_result(0, trials, second, _report(second, 1, 55.0))
    first.set_status(Trial.TERMINATED)
    clock.now += 15
    # the running trial has trained half of its epoch 2 (told to the signals actor)
    ray.get(signals.tell_progress.remote("bbb", 2, 0.5))
    printer.on_trial_complete(0, trials, first)
    done, status = lines[-2:]
    assert done == (
        "[   0:55] done  1/4  aaa  test R@10 mean 80.0 (ensemble); best dev R@10 mean 61.0"
    )
    # 5.5 of 12 epochs (3 per trial with the untrained epoch 0) in 55 s: 6.5 left, 65 s
    assert status == (
        "[   0:55] 1 of 4 trials done, 1 running, 2 left | best dev R@10 mean 61.0: aaa "
        "margin=0.1625 | 0:55 elapsed, about 1:05 left"
    )
    clock.now += QUIET_S - 1
    printer.on_step_end(0, trials)
    assert lines[-1] == status  # nothing new while the search was heard from lately
    clock.now += 1
    printer.on_step_end(0, trials)  # silent for QUIET_S: where the running trials are
    now = clock_text(55 + QUIET_S)
    assert "1 running, 2 left (bbb epoch 2/2 50%)" in lines[-1] and f"{now} elapsed" in lines[-1]
    second.set_status(Trial.ERROR)
    printer.on_trial_error(0, trials, second)
    assert lines[-2].endswith("FAILED 2/4  bbb  unknown error")
    assert lines[-1].startswith(f"[{now:>7}] 2 of 4 trials done, 0 running, 2 left")
    assert lines[-1].endswith(f"about {now} left")  # 6 of 12 epochs done in that time
    # Tune keeps its callbacks in tuner.pkl: the signals actor, which ends with this
    # driver, stays out of it (a resumed search could not unpickle its handle)
    # nor its write function (code, when it lives in __main__: a --resume refuses it)
    assert b"ray._private.serialization" not in ray.cloudpickle.dumps(printer)
    restored, shown = ray.cloudpickle.loads(ray.cloudpickle.dumps(printer)), len(lines)
    restored.write("a line of the restored copy")
    assert len(lines) == shown and restored.signals is None and printer.signals is signals


def test_an_epoch_line_waits_for_tune_to_hold_its_checkpoint() -> None:
    """Tune calls ``on_trial_result`` before it registers the result's checkpoint
    (``on_trial_save``): a line shown earlier would let a stop right after it resume
    before that epoch. A line whose save never comes is shown before the trial's end."""
    lines: list[str] = []
    printer = ProgressPrinter(SPACES["margin_sweep"], 2, 2, RETRIEVAL, lines.append)
    first, second = _trial("aaa", margin=0.1), _trial("bbb", margin=0.2)
    trials = [first, second]
    for trial in trials:
        trial.set_status(Trial.RUNNING)
        printer.on_trial_start(0, trials, trial)
    saved = {**_report(first, 1, 50.0), SHOULD_CHECKPOINT: True}
    printer.on_trial_result(0, trials, first, saved)
    assert not any("epoch" in line for line in lines)
    printer.on_trial_save(0, trials, first)
    assert lines[-1].endswith("1/2  aaa  epoch 1/2  dev R@10 mean 50.0")
    printer.on_trial_save(0, trials, first)  # a save without a new result: nothing
    assert sum("epoch" in line for line in lines) == 1
    printer.on_trial_result(0, trials, second, _report(second, 0, 10.0))  # no checkpoint
    assert lines[-1].endswith("2/2  bbb  epoch 0/2  dev R@10 mean 10.0")
    printer.on_trial_result(
        0, trials, second, {**_report(second, 1, 20.0), SHOULD_CHECKPOINT: True}
    )
    second.set_status(Trial.ERROR)
    printer.on_trial_error(0, trials, second)
    assert lines[-3].endswith("2/2  bbb  epoch 1/2  dev R@10 mean 20.0")
    assert "FAILED 2/2  bbb" in lines[-2]


def test_trials_are_numbered_as_they_start_after_those_earlier_drivers_ended() -> None:
    lines: list[str] = []
    printer = ProgressPrinter(SPACES["margin_sweep"], 4, 2, RETRIEVAL, lines.append, clock=Clock())
    earlier, first, second = _trial("aaa"), _trial("bbb"), _trial("ccc")
    earlier.set_status(Trial.TERMINATED)  # ended by the driver a --resume continues
    trials = [earlier, first, second]  # Tune's order: the order it made them
    for trial in (second, first):  # the later-made one starts first
        trial.set_status(Trial.RUNNING)
        printer.on_trial_start(0, trials, trial)
    starts = [line.split("] ", 1)[1].split()[:3] for line in lines]
    assert starts == [["start", "2/4", "ccc"], ["start", "3/4", "bbb"]]


def test_two_objectives_show_the_best_of_each() -> None:
    lines: list[str] = []
    printer = ProgressPrinter(SPACES["margin_sweep"], 2, 2, [RETRIEVAL, SEMANTIC], lines.append)
    a, b = _trial("aaa", margin=0.2), _trial("bbb", margin=0.4)
    for trial in (a, b):
        trial.set_status(Trial.RUNNING)
    a.update_last_result({"epoch": 1, RETRIEVAL: 70.0, SEMANTIC: 0.1})
    b.update_last_result({"epoch": 1, RETRIEVAL: 60.0, SEMANTIC: 0.3})
    line = printer.status_line([a, b])
    assert "best dev R@10 mean 70.0: aaa margin=0.2" in line
    assert "best dev semantic 0.300: bbb margin=0.4" in line
    assert line.startswith("0 of 2 trials done, 2 running, 0 left")
    assert line.endswith("an estimate after the first epoch")  # no work seen since it began


@pytest.mark.parametrize(
    ("space", "expected"),
    [
        ("margin_sweep", ["margin"]),
        ("encoders", ["family", "lr_max"]),  # not the preset's dozen keys
        ("seeds_presets", ["system"]),
        ("paper_grid", ["variant"]),
        ("lr_bounds", ["lr_max", "lr_min"]),  # lr_min, not its helper lr_min_position
    ],
)
def test_a_trial_is_named_by_what_it_tried(space: str, expected: list[str]) -> None:
    assert shown_keys(SPACES[space]) == expected


def test_full_shows_the_learning_rates_not_their_helpers() -> None:
    keys = shown_keys(SPACES["full"])
    assert {"lr_max", "lr_min", "margin", "reduction", "batch_size"} <= set(keys)
    assert not {"lr_min_position", "lr_max_sum", "lr_max_mean"} & set(keys)


def test_the_grid_samplers_stop_error_is_kept_out_and_nothing_else(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What Ray's OptunaSearch does when Optuna's grid sampler stops the study from
    outside Study.optimize: log the RuntimeError as a warning. That record is dropped;
    the same logger's other warnings are not."""
    quiet_libraries()
    quiet_libraries()  # idempotent
    logger = logging.getLogger("ray.tune.search.optuna.optuna_search")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        optuna.create_study().stop()
    except RuntimeError as exc:
        stop_error = exc
    # its own level set: another test in this process may have quietened Ray's loggers
    with caplog.at_level(logging.WARNING, logger=logger.name):
        logger.warning(stop_error)
        logger.warning(ValueError("The reported value is NaN"))
    assert [r.getMessage() for r in caplog.records] == ["The reported value is NaN"]


def test_tunes_advice_on_restoring_an_interrupted_run_is_kept_out_and_nothing_else(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Tune's tune.run ends an interrupted run with how to restore it through its Python
    API, for each of its entry points (read from Tune's own source); the driver prints
    the command that continues the search instead, so those records are dropped (also
    under --quiet, which keeps library warnings out). Its other warnings are kept."""
    import inspect

    import ray.tune.tune

    source = inspect.getsource(ray.tune.tune)
    entrypoints = re.findall(r'"restore_entrypoint": (?:\'|")(.*?)(?:\'|"),?\n', source)
    assert len(entrypoints) >= 4 and 'Tuner.restore(path="{path}", trainable=...)' in entrypoints
    quiet_libraries()
    quiet_libraries()  # idempotent
    logger = logging.getLogger("ray.tune.tune")
    with caplog.at_level(logging.WARNING, logger=logger.name):
        for entrypoint in entrypoints:
            advice = entrypoint.format(path="/runs/tune/x")
            logger.warning(
                "Experiment has been interrupted, but the most recent state was "
                f"saved.\nResume experiment with: {advice}"
            )
            logger.warning(
                "Training has been interrupted, but the most recent state was saved.\n"
                f"Resume training with: {advice}"
            )
        logger.error("Trials did not complete: %s", ["x_00000"])
        logger.warning("Experiment state snapshotting failed: no space left")
    assert [r.getMessage() for r in caplog.records] == [
        "Trials did not complete: ['x_00000']",
        "Experiment state snapshotting failed: no space left",
    ]


@pytest.mark.slow
def test_a_smoke_search_of_seeds_presets_is_small_and_shows_its_progress(
    tmp_path: Path, mlflow_runs
) -> None:
    """The space that ran 14.5 minutes as a smoke test: 2 trials (its first two seed
    systems) at the smoke sizes; the progress says k of N, the best so far and an
    estimate; the notice of the Ray it starts (a local one, in its own process: this
    test process joins only the session's cluster) and the grid sampler's Study.stop
    error stay out."""
    args = [sys.executable, "-m", "gridsearch.run", "--space", "seeds_presets", "--smoke-test",
            "--no-dashboard", "--max-concurrent", "1", "--runs-dir", str(tmp_path),
            "--experiment", "seeds"]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    out, err = done.stdout, done.stderr
    assert "smoke test: the grid cut to its first 2 of 4 points (system char_rnn, word_bow)" in out
    assert "start 1/2" in out and "start 2/2" in out and "system=word_bow" in out
    assert "1 of 2 trials done" in out and "about " in out and " left" in out
    assert "2 of 2 trials done, 0 running, 0 left | best dev R@10 mean " in out
    assert "2 trials: 2 finished" in out
    both = out + err
    assert "Token authentication is enabled" not in both and "Study.stop" not in both
    assert not (tmp_path / ".progress" / "seeds").exists()
    _, runs = mlflow_runs(tmp_path, "seeds")
    trials = {r.data.params["encoder"]: r.data.params for r in runs if "encoder" in r.data.params}
    assert set(trials) == {"char_rnn", "word_bow"}
    assert trials["char_rnn"]["hidden_size"] == "16"  # 1024 / 64, the smoke scale
    assert trials["word_bow"]["word_embedding_dim"] == "8"  # 128 / 64, at least the smoke n


# --quiet (the summary only, nothing on stderr): tests/gridsearch/test_selection.py runs
# one of its two searches with it, and holds it to the same decisions as the other


@pytest.mark.slow  # 5 s or more in the fast tier (BENCHMARKS.md)
def test_tunes_slow_step_warning_is_raised_past_a_busy_machines_mlflow_writes() -> None:
    """Tune reads its "may be a performance bottleneck" threshold when imported, so
    gridsearch.run sets it first (a fresh interpreter: these tests imported Tune already)."""
    import os
    import subprocess
    import sys

    code = (
        "import gridsearch.run\n"
        "from ray.tune.utils.util import warn_if_slow\n"
        "print(warn_if_slow.DEFAULT_THRESHOLD)\n"
    )
    # (without the setting this process inherited from its own import of gridsearch.run)
    env = {k: v for k, v in os.environ.items() if k != "TUNE_WARN_THRESHOLD_S"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert float(done.stdout.strip()) == 10.0
    # Tune imported first (a notebook, a test process): the progress display's set-up
    # raises it all the same
    code = (
        "from ray.tune.utils.util import warn_if_slow\n"
        "import gridsearch.run\n"
        "from gridsearch.progress import quiet_libraries\n"
        "print(warn_if_slow.DEFAULT_THRESHOLD)\n"
        "quiet_libraries()\n"
        "print(warn_if_slow.DEFAULT_THRESHOLD)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert [float(x) for x in done.stdout.split()] == [0.5, 10.0]
