"""A search stopped by a signal says so everywhere: exit status 130, the summary's
"unfinished" trials and "the search stopped (SIGNAL)" line, the resume command, the
MLflow parent run KILLED with outcome "interrupted", no run left RUNNING, and trials
that ran out "finished" (never "stopped_early": FIFO stops no trial). Every signal at
several phases of a real search (the CLI in a subprocess, a real local Ray, a real
MLflow sqlite store); Ctrl+C once is then resumed to its end with the command it
printed (in this process: nothing to signal there). SIGTERM at a trial's end is the
fused search of ``test_fused_edges`` (a fused trial's end, its two members keeping
theirs), checked by ``stopped_by`` and resumed with the command it printed: a lone
trial is a group of one, its outcome at a stop read from its Tune trial's end as a
member's is, so a search of its own here paid a driver, an MLflow store and two trial
processes to show it again."""

from __future__ import annotations

import re
import signal
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest

from gridsearch.run import main
from gridsearch.summary import OUTCOME_WORDS
from tests.gridsearch.test_drivers import Driver
from tests.gridsearch.test_run import check_runs

pytestmark = pytest.mark.slow
SEARCH = ["--space", "margin_sweep", "--smoke-test", "--no-dashboard", "--scheduler", "fifo"]


def _interrupted(mlflow_runs, runs: Path, experiment: str) -> Counter[str]:
    """The parent is KILLED and "interrupted"; nothing RUNNING; the trials' outcomes."""
    _, found = mlflow_runs(runs, experiment)
    assert not [r for r in found if r.info.status == "RUNNING"], "a run was left RUNNING"
    (parent,) = [r for r in found if r.data.tags.get("search.role") == "search"]
    assert parent.info.status == "KILLED" and parent.data.tags["outcome"] == "interrupted"
    trials = [r for r in found if r.data.tags.get("search.role") == "trial"]
    for run in trials:
        expected = {"finished": "FINISHED", "search_ended": "KILLED"}[run.data.tags["outcome"]]
        assert run.info.status == expected, run.data.tags
    return Counter(r.data.tags["outcome"] for r in trials)


def stopped_by(
    driver: Driver, signals: list[str], mlflow_runs, runs: Path, experiment: str,
    joined: list[str],
) -> tuple[Counter[str], str, str, str]:  # fmt: skip
    """``signals`` sent to ``driver`` (a search of ``experiment`` in ``runs``, sent to a
    cluster by ``joined``) once it printed what the test waited for; everything a
    stopped search says checked. Returns the trials' outcomes, the "the search stopped"
    line, the resume command it printed and its whole output."""
    for name in signals:
        driver.process.send_signal(getattr(signal, name))
        time.sleep(0.3)
    code, out = driver.finish(timeout_s=300)
    assert code == 130, out
    assert "Traceback" not in out and "finished in" not in out
    assert "Aborted" not in out  # no Ray abort dump (exit 134) after SIGTERM
    assert "Tuner.restore" not in out and "resume=True" not in out  # not Tune's advice
    lines = out.splitlines()
    counts = [line for line in lines if re.match(r"\d+ trials?: ", line)]
    assert len(counts) == 1 and "stopped early" not in counts[0], out
    assert "search_ended" not in counts[0], out  # the user's words, not the tag's
    stopped = [line for line in lines if line.startswith(f"the search stopped ({signals[0]})")]
    assert len(stopped) == 1 and "not finished" in stopped[0], out
    resume = " ".join(
        [
            f"python -m gridsearch.run --experiment {experiment} --resume --runs-dir",
            str(runs.resolve()),
            *joined,
        ]
    )  # on the cluster it ran on
    assert f"continue it:  {resume}" in lines, out
    outcomes = _interrupted(mlflow_runs, runs, experiment)
    assert set(outcomes) <= {"finished", "search_ended"}
    assert _summary_counts(counts[0]) == dict(outcomes)  # the summary says what MLflow holds
    assert not (runs / "locks" / f"{experiment}.lock").exists()
    return outcomes, stopped[0], resume, out


@pytest.mark.parametrize(
    ("signals", "when"),
    [
        # one Ctrl+C mid-trial: Tune's graceful stop; then resumed to the trials asked for
        (["SIGINT"], "epoch 1/2"),
        (["SIGINT", "SIGINT"], "epoch 1/2"),  # twice: the driver stops at once
        (["SIGTERM"], "start 1/"),  # before the first result
        # at a trial's end: test_fused_edges' fused search stopped and resumed
    ],
    ids=["sigint-once", "sigint-twice", "sigterm-at-start"],
)
def test_a_signal_is_an_interruption_everywhere(
    tmp_path: Path, mlflow_runs, capsys: pytest.CaptureFixture[str], signals: list[str],
    when: str, on_cluster: list[str],
) -> None:  # fmt: skip
    runs = tmp_path / "runs"
    # Ctrl+C twice meets a Ray the driver started itself (a local one, the default); the
    # other cases, the session's cluster (tests/conftest.py)
    joined = [] if signals == ["SIGINT", "SIGINT"] else on_cluster
    # 2 trials, one at a time, in every case: the signal finds the first trial running and
    # the second not run, so the outcomes below are exact; a second trial running beside
    # the first would only be started to be cut short (at the start and at Ctrl+C twice:
    # the module's process tree measured 5-7 CPU-s less without them)
    # SIGTERM at the start meets the store's baselines being computed beside the trials
    baselines = ["--baselines"] if signals == ["SIGTERM"] else []
    args = [*SEARCH, "--num-samples", "2", "--max-concurrent", "1", "--runs-dir", str(runs),
            "--experiment", "x", *baselines, *joined]  # fmt: skip
    driver = Driver(*args)
    driver.wait_for(when)
    outcomes, stopped, resume, out = stopped_by(driver, signals, mlflow_runs, runs, "x", joined)
    # the first of two trials cut short (at its start or mid-trial), the other not run
    assert outcomes == {"search_ended": 1} and "with 2 trial(s) not finished" in stopped
    if baselines:  # not waited for: known by then, or their process ended with the search
        assert "baselines: computing the store's char n-gram baselines once" in out
        assert not [c for c in _command_lines() if "trainables.baselines" in c and str(runs) in c]
    if signals != ["SIGINT"]:
        return  # resumed below: Ctrl+C once
    # the command it printed, run in this process (nothing to signal): the trials left are
    # run; the parent finished
    assert main([*resume.split()[3:], "--no-dashboard"]) == 0
    out = capsys.readouterr().out
    assert "2 trials: 2 finished" in out, out
    client, found = mlflow_runs(runs, "x")
    (parent,) = [r for r in found if r.data.tags.get("search.role") == "search"]
    assert parent.info.status == "FINISHED" and parent.data.tags["outcome"] == "finished"
    check_runs(client, found, trials=2, epochs=2)  # each trial once, each epoch once
    study = optuna.load_study(study_name="x", storage=f"sqlite:///{runs / 'tune' / 'x.optuna.db'}")
    assert sorted(t.number for t in study.trials) == [0, 1]


def _command_lines() -> list[str]:
    """Every running process's command line (Linux's ``/proc``), its words joined."""
    lines = []
    for entry in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            lines.append(entry.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # ended meanwhile
            continue
    return lines


def _summary_counts(line: str) -> dict[str, int]:
    """``2 trials: 1 finished, 1 unfinished`` -> {"finished": 1, "search_ended": 1} (the
    outcomes, from the words the summary says them in)."""
    outcome = {words: tag for tag, words in OUTCOME_WORDS.items()}
    parts = line.split(": ", 1)[1].split(", ")
    return {outcome[part.split(" ", 1)[1]]: int(part.split(" ", 1)[0]) for part in parts}


def test_an_interrupted_end_closes_everything_as_interrupted(tmp_path: Path) -> None:
    """A driver stopped after its trials ended (before it registered the best models),
    or before Tune ended them: the parent KILLED "interrupted" though no trial is left,
    and every run still RUNNING closed "search_ended"."""
    from gridsearch._outcome import Outcome
    from gridsearch.tracking import close_parent
    from tests.gridsearch.tracking.test_parent import _search

    client, _, parent, runs = _search(tmp_path, "retrieval")
    runs.log_epoch("a", {"margin": 0.2}, 0, {"dev/r10_mean": 3.0})
    runs.log_epoch("b", {"margin": 0.3}, 0, {"dev/r10_mean": 4.0})
    runs.close("a", {"margin": 0.2}, Outcome.FINISHED, checkpoint=None)
    assert runs.end_running(Outcome.SEARCH_ENDED) == 1
    ended = client.get_run(runs.run_of("b", {}))
    assert (ended.info.status, ended.data.tags["outcome"]) == ("KILLED", "search_ended")
    assert client.get_run(runs.run_of("a", {})).info.status == "FINISHED"
    assert close_parent(client, parent, [], "summary", 0, 1.0, interrupted=True) == "interrupted"
    assert client.get_run(parent).info.status == "KILLED"


def test_sigterm_before_ray_starts_releases_the_lock_and_says_how_to_go_on(
    tmp_path: Path, on_cluster: list[str]
) -> None:
    """SIGTERM while the driver reads the data (before Ray, before anything is recorded)
    stops it like Ctrl+C: exit 130, no traceback, the experiment's lock released, and the
    line that says to run the same command again (not Python's default death, 143)."""
    runs = tmp_path / "runs"
    driver = Driver(*SEARCH, "--runs-dir", str(runs), "--experiment", "early", *on_cluster)
    driver.wait_for("data: ")
    driver.process.send_signal(signal.SIGTERM)
    code, out = driver.finish(timeout_s=120)
    assert code == 130, out
    assert "Traceback" not in out
    assert "interrupted before the search ran" in out
    assert not (runs / "locks" / "early.lock").exists()
