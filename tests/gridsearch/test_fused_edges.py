"""A fused search (``--fuse K``) combined with what a search may also be asked for, end to
end through the CLI, a real local Ray, a real MLflow sqlite store and a real Optuna study
on the embedded world (``--smoke-test``):

- ``--resume`` after a signal stopped it at a fused trial's end (mid-trial, on a cluster
  of two nodes: ``test_faults``): every configuration trains once, each member's MLflow run has
  each epoch once and ends with its own outcome, its Optuna trial agrees, and the
  summary and the progress lines count configurations, not Tune trials; the stop is the
  suite's SIGTERM at a trial's end, checked as ``test_interrupted`` checks every signal;
- ``--seeds-per-config 2``: each member is the mean of its seeds, as a lone seeded trial
  of the same configuration records it, and checkpoints its seeds as that trial does;
- ``--objective both``: each member its own trial of the multi-objective study, with its
  own two values, stopped early by the Pareto rule on its own; the Pareto front and the
  progress lines name members.

And the progress display of a fused search, driven with real Tune ``Trial`` objects.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler

from gridsearch import _optuna
from gridsearch._scheduler import make_scheduler
from gridsearch.progress import ProgressPrinter
from gridsearch.run import main
from gridsearch.spaces import SPACES
from gridsearch.summary import OUTCOME_WORDS
from tests.gridsearch.test_drivers import Driver
from tests.gridsearch.test_interrupted import stopped_by
from tests.gridsearch.test_run import check_runs
from tests.tolerances import REORDERED
from trainables import names
from trainables.group import GROUP_FILE, member_folder, state_file
from trainables.tune import MEMBERS, MEMBERS_FUSED, member_key

F32 = REORDERED[torch.float32]
RETRIEVAL = names.selectable(names.BEST_RETRIEVAL)
SEMANTIC = names.selectable(names.BEST_SEMANTIC)
SEARCH = ["--space", "margin_sweep", "--smoke-test", "--no-dashboard"]
EPOCHS = 2  # a smoke test's; its learning-rate cycle is one epoch: ASHA's rung is epoch 1


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The runs directory of this module's searches, each its own experiment: its MLflow
    store and embedded world are set up by the first search (about 3 CPU-s of a driver),
    found by the others."""
    return tmp_path_factory.mktemp("runs")


# -- reading back what a search recorded --------------------------------------------


def _search(
    capfd: pytest.CaptureFixture[str],
    runs: Path,
    experiment: str,
    *more: str,
    engine: str = "auto",
) -> str:
    """``gridsearch.run`` to its end (exit 0), in this process; its output. ``engine``:
    how the trials train their models (``--engine``; a CPU fuses only when asked)."""
    capfd.readouterr()
    code = main([*SEARCH, "--runs-dir", str(runs), "--experiment", experiment,
                 "--engine", engine, *more])  # fmt: skip
    out, err = capfd.readouterr()
    assert code == 0, out + err
    return out


def _driver(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``gridsearch.run ARGS`` in this process: its exit status and its output (stdout,
    then stderr), as ``Driver.finish`` gives a driver's of its own."""
    capfd.readouterr()
    code = main(list(args))
    out, err = capfd.readouterr()
    return code, out + err


def _trial_runs(mlflow_runs, runs: Path, experiment: str) -> tuple[Any, dict[str, Any]]:
    """The trials' MLflow runs by their ``tune.trial_id`` (none left RUNNING)."""
    client, found = mlflow_runs(runs, experiment)
    assert not [r for r in found if r.info.status == "RUNNING"], "a run was left RUNNING"
    trials = [r for r in found if r.data.tags.get("search.role") == "trial"]
    return client, {r.data.tags["tune.trial_id"]: r for r in trials}


def _study(runs: Path, experiment: str) -> optuna.Study:
    storage = f"sqlite:///{runs / 'tune' / f'{experiment}.optuna.db'}"
    return optuna.load_study(study_name=experiment, storage=storage)


def _by_member(study: optuna.Study) -> dict[str, optuna.trial.FrozenTrial]:
    return {t.user_attrs[_optuna.TUNE_TRIAL_ATTR]: t for t in study.trials}


def _history(client: Any, run: Any, key: str) -> list[tuple[int, float]]:
    return [(int(m.step), m.value) for m in client.get_metric_history(run.info.run_id, key)]


def _steps(client: Any, run: Any) -> list[int]:
    return [step for step, _ in _history(client, run, "epoch")]


def _check_members(
    client: Any, runs: dict[str, Any], study: optuna.Study, configurations: int
) -> dict[str, str]:
    """Every configuration trained once: as many MLflow runs and Optuna trials as
    configurations, the same members, each configuration once; each run has every epoch
    it trained exactly once, to its last (finished) or to its stop (stopped early), and
    its Optuna trial is COMPLETE, linked to it, with its own values at that epoch.
    Returns each member's outcome."""
    trials = _by_member(study)
    assert len(runs) == len(trials) == configurations
    assert sorted(runs) == sorted(trials)  # the same member ids in both
    margins = [float(r.data.params["margin"]) for r in runs.values()]
    assert len(set(margins)) == configurations  # each configuration once
    outcomes = {}
    for member, run in runs.items():
        trial, outcome = trials[member], run.data.tags["outcome"]
        steps = _steps(client, run)
        last = EPOCHS if outcome == "finished" else steps[-1]
        assert outcome in ("finished", "stopped_early") and run.info.status == "FINISHED"
        assert steps == list(range(last + 1)), (member, steps)  # each epoch once
        assert last < EPOCHS or outcome == "finished", member
        assert trial.state == optuna.trial.TrialState.COMPLETE, member
        assert trial.user_attrs[_optuna.MLFLOW_RUN_ATTR] == run.info.run_id
        assert trial.params["margin"] == pytest.approx(float(run.data.params["margin"]))
        values = [_history(client, run, key)[-1] for key in _objectives(study)]
        assert [step for step, _ in values] == [last] * len(values), member
        assert trial.values == pytest.approx([value for _, value in values]), member
        outcomes[member] = outcome
    return outcomes


def _objectives(study: optuna.Study) -> list[str]:
    return [RETRIEVAL, SEMANTIC] if len(study.directions) == 2 else [RETRIEVAL]


@dataclass(frozen=True)
class _Seen:
    """A member as a scheduler sees a trial (by its id), as the fused searcher shows it."""

    trial_id: str


def _replayed_stops(
    scheduler: TrialScheduler, client: Any, runs: dict[str, Any], metrics: list[str]
) -> set[str]:
    """The members ``scheduler`` stops when it gets their recorded reports as the fused
    searcher hands them on: epoch by epoch, the members in their trial's order."""
    stopped: set[str] = set()
    scheduler.set_search_properties(metrics[0], "max")  # as the search sets it up
    members = sorted(runs, key=lambda m: int(m.rsplit("-m", 1)[1]))
    histories = {m: {k: dict(_history(client, runs[m], k)) for k in metrics} for m in members}
    for member in members:
        scheduler.on_trial_add(None, _Seen(member))  # type: ignore[arg-type]
    for epoch in range(EPOCHS):  # the last epoch's report ends a member (its ensemble)
        for member in members:
            if member in stopped or epoch not in histories[member][metrics[0]]:
                continue
            report = {"epoch": epoch, **{k: histories[member][k][epoch] for k in metrics}}
            action = scheduler.on_trial_result(None, _Seen(member), report)  # type: ignore[arg-type]
            if action == TrialScheduler.STOP:
                stopped.add(member)
    return stopped


def _summary_counts(out: str) -> Counter[str]:
    """The summary's ``N trials: 2 finished, 1 stopped early`` line, as counts of the
    outcomes (``finished``, ``stopped_early``) its words say."""
    (line,) = [line for line in out.splitlines() if re.match(r"\d+ trials?: ", line)]
    outcome = {words: tag for tag, words in OUTCOME_WORDS.items()}
    parts = line.split(": ", 1)[1].split(", ")
    return Counter({outcome[part.split(" ", 1)[1]]: int(part.split(" ", 1)[0]) for part in parts})


def _last_status(out: str) -> str:
    """The last status line, without its clock."""
    return [line for line in out.splitlines() if " trials done, " in line][-1].split("] ", 1)[1]


# -- --resume -------------------------------------------------------------------------


@pytest.mark.slow
def test_a_fused_search_stopped_at_a_trials_end_resumes_then_extends_by_configurations(
    runs: Path, mlflow_runs, on_cluster: list[str], capfd: pytest.CaptureFixture[str]
) -> None:
    """Two fused trials of two, one at a time; SIGTERM when the first has ended: the
    search says it was interrupted everywhere (``test_interrupted.stopped_by``: exit 130,
    the summary, MLflow's outcomes, the parent, the lock, the resume command), two
    configurations are done and two are not (not four: the ended trial's members keep
    their end); the --resume it printed runs the other two, once, and finishes the
    parent. The search, now finished, extended by --num-samples 6 (configurations, not
    fused trials) runs one more fused trial of two; resumed again, it says it has run all
    six and exits 0 without Ray. Only the first driver, the one signalled, is a process
    of its own; the others run in this one."""
    first = Driver(*SEARCH, "--scheduler", "fifo", "--num-samples", "4", "--fuse", "2",
                   "--max-concurrent", "1", "--runs-dir", str(runs),
                   "--experiment", "y", *on_cluster)  # fmt: skip
    first.wait_for("done  1-2/4")
    outcomes, stopped, printed, out = stopped_by(
        first, ["SIGTERM"], mlflow_runs, runs, "y", on_cluster
    )
    assert outcomes["finished"] == 2  # the ended trial's members keep their end
    assert "the search stopped (SIGTERM) with 2 trial(s) not finished" in stopped, out
    assert _summary_counts(out)["finished"] == 2
    assert "2 of 4 trials done, 0 running, 2 left" in out, out
    resume = printed.split()[3:]  # the command it printed, run in this process
    code, out = _driver(capfd, *resume)
    assert code == 0, out
    assert "start 3-4/4" in out  # numbered after the trial an earlier driver ran
    assert _summary_counts(out) == Counter({"finished": 4})
    assert _last_status(out).startswith("4 of 4 trials done, 0 running, 0 left")
    assert len(list((runs / "tune" / "y").glob("*/result.json"))) == 2  # two fused trials
    client, found = mlflow_runs(runs, "y")
    (parent,) = [r for r in found if r.data.tags.get("search.role") == "search"]
    assert parent.info.status == "FINISHED" and parent.data.tags["outcome"] == "finished"
    check_runs(client, found, trials=4, epochs=EPOCHS)  # each member once, each epoch once
    assert sorted(t.number for t in _study(runs, "y").trials) == [0, 1, 2, 3]
    client, members = _trial_runs(mlflow_runs, runs, "y")
    assert set(_check_members(client, members, _study(runs, "y"), 4).values()) == {"finished"}

    code, out = _driver(capfd, *resume, "--num-samples", "6")
    assert code == 0, out
    assert "start 5-6/6" in out and _summary_counts(out) == Counter({"finished": 6}), out
    assert len(list((runs / "tune" / "y").glob("*/result.json"))) == 3  # one more fused trial
    client, members = _trial_runs(mlflow_runs, runs, "y")
    assert set(_check_members(client, members, _study(runs, "y"), 6).values()) == {"finished"}
    capfd.readouterr()
    code = main(resume)
    out, err = capfd.readouterr()
    assert code == 0, out + err
    assert err.startswith("the search 'y' has run all its 6 trials: nothing to run"), err


# -- --seeds-per-config ----------------------------------------------------------------


@pytest.mark.slow
def test_fused_members_at_two_seeds_record_what_lone_seeded_trials_record(
    runs: Path, mlflow_runs, on_cluster: list[str], capfd: pytest.CaptureFixture[str]
) -> None:
    """``--fuse 2 --seeds-per-config 2 --engine fused``: one Tune trial, its four seats
    (two members at two seeds) one fused model; each member records what the same
    configuration records as a lone trial (a group of one) at two seeds trained one after
    the other (``--engine sequential``): the same parameters but the engine, the same
    metric keys (the spread over seeds among them), each metric at the same steps with the
    same values to float32 rounding, and its Optuna value and intermediate values; each
    member's seeds checkpointed in its member folder as the lone trial's are."""
    more = ["--scheduler", "fifo", "--num-samples", "2", "--seeds-per-config", "2", *on_cluster]
    fused_out = _search(capfd, runs, "fused", *more, "--fuse", "2", engine="fused")
    # the lone trials one at a time: one trial process trains both, not one each
    _search(capfd, runs, "alone", *more, "--max-concurrent", "1", engine="sequential")
    assert "2 trials: 2 finished" in fused_out
    (trial,) = [p.parent for p in (runs / "tune" / "fused").glob("*/result.json")]
    reports = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
    assert [r[MEMBERS_FUSED] for r in reports] == [1] * (EPOCHS + 1)
    assert all(member_key(m, names.spread(RETRIEVAL)) in reports[-1] for m in (0, 1))
    last = sorted(trial.glob("checkpoint_*"))[-1]
    for member in (0, 1):
        saved = sorted(p.name for p in member_folder(last, member).iterdir())
        assert saved == sorted([state_file(0), state_file(1)])
    assert json.loads((last / GROUP_FILE).read_text()) == {"stopped": []}
    lone = sorted(p.parent for p in (runs / "tune" / "alone").glob("*/result.json"))
    assert len(lone) == 2  # two Tune trials, each a group of one, not fused
    for folder in lone:
        results = [json.loads(line) for line in (folder / "result.json").read_text().splitlines()]
        assert [r[MEMBERS_FUSED] for r in results] == [0] * (EPOCHS + 1)
        saved = sorted(
            p.name for p in member_folder(sorted(folder.glob("checkpoint_*"))[-1], 0).iterdir()
        )
        assert saved == sorted([state_file(0), state_file(1)])
    studies = {
        e: {t.params["margin"]: t for t in _study(runs, e).trials} for e in ("fused", "alone")
    }
    assert sorted(studies["fused"]) == sorted(studies["alone"])  # the same two configurations
    for margin, fused in studies["fused"].items():
        alone = studies["alone"][margin]
        assert fused.value == pytest.approx(alone.value, rel=F32.rtol, abs=F32.atol)
        assert sorted(fused.intermediate_values) == sorted(alone.intermediate_values)
    recorded = {}
    for experiment in ("fused", "alone"):
        client, found = _trial_runs(mlflow_runs, runs, experiment)
        assert {r.data.tags["outcome"] for r in found.values()} == {"finished"}
        recorded[experiment] = {float(r.data.params["margin"]): r for r in found.values()}
    assert sorted(recorded["fused"]) == sorted(recorded["alone"])
    test_semantic = names.key(names.TEST, "semantic")
    keys = (names.LOSS, names.PRIMARY_RETRIEVAL, names.spread(RETRIEVAL), test_semantic,
            names.spread(test_semantic))  # fmt: skip
    for margin, fused in recorded["fused"].items():
        alone = recorded["alone"][margin]
        engines = (fused.data.params.pop("engine"), alone.data.params.pop("engine"))
        assert engines == ("fused", "sequential")
        assert fused.data.params == alone.data.params  # seed included: the same seeds
        assert sorted(fused.data.metrics) == sorted(alone.data.metrics)
        for key in keys:
            got, want = _history(client, fused, key), _history(client, alone, key)
            assert [s for s, _ in got] == [s for s, _ in want], key
            for (_, a), (_, b) in zip(got, want, strict=True):
                assert a == pytest.approx(b, rel=F32.rtol, abs=F32.atol), key


# -- --objective both ----------------------------------------------------------------------


@pytest.mark.slow
def test_fused_members_on_two_objectives_are_each_their_own_pareto_trial(
    runs: Path, mlflow_runs, on_cluster: list[str], capfd: pytest.CaptureFixture[str]
) -> None:
    """``--fuse 2 --objective both`` under ASHA's Pareto form: two configurations in one
    trial, each its own trial of the two-objective study with its own two values (no
    intermediate values: Optuna keeps none for two objectives), stopped at the rung when
    enough members before it dominate it; the summary's Pareto front is Optuna's, by
    member; the progress names the best member on each objective. Two configurations
    (the fewest: each one more is one more model trained in the fused trial) at seed 8:
    on the embedded world the first dominates the second at the rung (the same dev R@10
    best, 69.2; dev semantic best 0.261 against 0.257), so the rule stops it. (At seed 0,
    of two to five configurations, all members but a fifth end epoch 1 tied on both
    objectives at the untrained model's values, and the rule stops none.)"""
    out = _search(capfd, runs, "both", "--scheduler", "asha", "--objective", "both",
                  "--num-samples", "2", "--fuse", "2", "--seed", "8", *on_cluster)  # fmt: skip
    assert "at epoch 1," in out and "Pareto rank" in out
    study = _study(runs, "both")
    assert len(study.directions) == 2
    client, members = _trial_runs(mlflow_runs, runs, "both")
    outcomes = _check_members(client, members, study, 2)
    assert all(not t.intermediate_values for t in study.trials)
    assert len({tuple(t.values) for t in study.trials}) > 1  # each member its own
    assert _summary_counts(out) == Counter(outcomes.values())
    pareto = make_scheduler("asha", EPOCHS, 1, [RETRIEVAL, SEMANTIC], ["max", "max"])
    stopped = _replayed_stops(pareto, client, members, [RETRIEVAL, SEMANTIC])
    assert stopped, "this search's Pareto rule stops a member at its rung (seeded)"
    assert {m for m, o in outcomes.items() if o == "stopped_early"} == stopped
    lines = out.splitlines()
    front = lines[lines.index("Pareto front (dev R@10 mean best, dev semantic best):") + 1 :]
    front = list(itertools.takewhile(lambda line: line.startswith("  "), front))
    named = {line.split(":", 1)[0].strip() for line in front}
    assert named == {t.user_attrs[_optuna.TUNE_TRIAL_ATTR] for t in study.best_trials}
    status = _last_status(out)
    for objective, label, spec in ((0, "dev R@10 mean", ".1f"), (1, "dev semantic", ".3f")):
        best = max(study.trials, key=lambda t: t.values[objective])
        member = best.user_attrs[_optuna.TUNE_TRIAL_ATTR]
        assert f"best {label} {best.values[objective]:{spec}}: {member} margin=" in status


# -- the progress display ----------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _fused_trial(trial_id: str, *margins: float) -> Trial:
    config = {MEMBERS: [{"margin": margin} for margin in margins]}
    return Trial("trial", config=config, trial_id=trial_id, stub=True)


def _fused_report(
    trial: Trial, epoch: int, members: dict[int, tuple[float, float]], last: int
) -> dict:
    """One fused result: each member's dev R@10 and semantic (best so far) at ``epoch``,
    finished at ``last``; the best member on R@10 un-prefixed, as the trial's."""
    result: dict[str, Any] = {MEMBERS_FUSED: 1}
    for member, (r10, semantic) in members.items():
        report = {"epoch": epoch, names.PRIMARY_RETRIEVAL: r10, RETRIEVAL: r10, SEMANTIC: semantic}
        if epoch == last:
            report[names.FINISHED] = 80.0 + member
        result.update({member_key(member, k): v for k, v in report.items()})
    lead = max(members, key=lambda m: members[m][0])
    result.update({k.split("/", 1)[1]: v for k, v in result.items() if k.startswith(f"m{lead}/")})
    trial.update_last_result(result)
    return result


def test_the_progress_of_a_fused_search_counts_configurations_and_names_members() -> None:
    """Two fused trials of two members, three epochs each: the numbers, start and epoch
    lines, k of N counting members (one stopped early inside a running trial is done),
    the best member of each objective, a trial's end line and the estimate."""
    lines: list[str] = []
    clock = Clock()
    printer = ProgressPrinter(
        SPACES["margin_sweep"], 4, 3, [RETRIEVAL, SEMANTIC], lines.append, clock=clock
    )
    first, second = _fused_trial("aaa", 0.1, 0.2), _fused_trial("bbb", 0.3, 0.4)
    trials = [first, second]
    printer.on_step_end(0, trials)  # before any work: the estimate's starting point
    first.set_status(Trial.RUNNING)
    printer.on_trial_start(0, trials, first)
    assert lines[-1] == "[   0:00] start 1-2/4  aaa  m0 margin=0.1; m1 margin=0.2"
    clock.now += 20
    for epoch in (0, 1):
        report = _fused_report(first, epoch, {0: (50.0, 0.30), 1: (60.0 + epoch, 0.10)}, 3)
        printer.on_trial_result(0, trials, first, report)
    assert lines[-1] == "[   0:20]       1-2/4  aaa  epoch 1/3  dev R@10 mean 61.0  (m1, best of 2)"
    # member 1 was stopped after epoch 1: the next report leaves it out, and it is done
    printer.on_trial_result(0, trials, first, _fused_report(first, 2, {0: (55.0, 0.35)}, 3))
    assert lines[-1].endswith("epoch 2/3  dev R@10 mean 55.0  (m0, best of 1)")
    status = printer.status_line(trials)
    assert status.startswith("1 of 4 trials done, 1 running, 2 left | ")
    # the best on each objective is a member, by its own id (not the trial's leader)
    assert "best dev R@10 mean 61.0: aaa-m1 margin=0.2" in status
    assert "best dev semantic 0.350: aaa-m0 margin=0.1" in status
    printer.on_trial_result(0, trials, first, _fused_report(first, 3, {0: (58.0, 0.36)}, 3))
    first.set_status(Trial.TERMINATED)
    second.set_status(Trial.RUNNING)
    printer.on_trial_start(0, trials, second)
    assert lines[-1] == "[   0:20] start 3-4/4  bbb  m0 margin=0.3; m1 margin=0.4"
    clock.now += 40
    printer.on_trial_complete(0, trials, first)
    done, status = lines[-2:]
    assert done == (
        "[   1:00] done  1-2/4  aaa  1 finished, 1 stopped early; "
        "best dev R@10 mean 61.0 (m1), dev semantic 0.360 (m0)"
    )
    # 2 of 4 configurations (4 epochs each with the untrained epoch 0) in 60 s: 60 s left
    assert status.startswith("[   1:00] 2 of 4 trials done, 2 running, 0 left | ")
    assert status.endswith("1:00 elapsed, about 1:00 left")
