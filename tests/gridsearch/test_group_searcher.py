"""The searcher of every search (``gridsearch._groups.GroupSearcher``) on a real Optuna
study and a real signals actor (the session's Ray cluster): configurations of different
shapes never share a trial, every configuration drawn is trained exactly once, each
member is its own Optuna trial (its intermediate values at step = epoch, its own value),
a group of one's member goes by its trial's id, and the search's scheduler stops members
one by one through the trials' signals actor, which a restored searcher tells again."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import optuna
import pytest
import ray
from ray.tune.schedulers import FIFOScheduler
from ray.tune.search import Searcher

from gridsearch import _optuna
from gridsearch._groups import GroupSearcher, group_search, shape_of
from gridsearch._members import member_id
from gridsearch._scheduler import make_scheduler
from gridsearch.spaces import SearchSpace, get_space
from trainables import names
from trainables.tune import MEMBERS, member_key, start_signals

_FIXED = {"epochs": 8, "seed": 0, "device": "cpu", "threads": 1, "cycle_epochs": 2}
METRIC = names.BEST_RETRIEVAL


def _mixed(trial: Any) -> dict[str, Any]:
    """Two shapes (the RNN type) and a member field (the margin)."""
    return {
        "rnn_type": trial.suggest_categorical("rnn_type", ["gru", "lstm"]),
        "margin": trial.suggest_float("margin", 0.05, 0.5),
    }


MIXED = SearchSpace("mixed", "two shapes, many margins", _mixed)


def stops(signals: Any, trial_id: str) -> dict[int, int]:
    """The members of ``trial_id`` its signals actor says are stopped, with their epochs."""
    return dict(ray.get(signals.stops.remote(trial_id)))


def grouped(
    tmp_path: Path, space: str, fuse: int, total: int, scheduler: Any, signals: Any
) -> GroupSearcher:
    _optuna.quiet()
    limited = _optuna.searcher(
        MIXED if space == "mixed" else get_space(space), _FIXED,
        optuna.samplers.RandomSampler(seed=1), metric=METRIC, mode="max", study="s",
        storage_url=f"sqlite:///{tmp_path / 'study.db'}", max_concurrent=8,
    )  # fmt: skip
    search, tune_scheduler = group_search(
        limited, scheduler, fuse=fuse, total=total, signals=signals
    )
    assert isinstance(tune_scheduler, FIFOScheduler)  # Tune's: the members' is the searcher's
    assert isinstance(search.searcher, GroupSearcher)
    return search.searcher


def _study(tmp_path: Path) -> optuna.Study:
    return optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'study.db'}")


@pytest.mark.slow  # 5 s or more in the fast tier (BENCHMARKS.md)
def test_configurations_of_different_shapes_never_share_a_trial(
    tmp_path: Path, signals: Any
) -> None:
    search = grouped(tmp_path, "mixed", fuse=3, total=7, scheduler=FIFOScheduler(), signals=signals)
    groups: list[list[dict[str, Any]]] = []
    while (config := search.suggest(f"t{len(groups)}")) is not Searcher.FINISHED:
        assert config is not None
        groups.append(config[MEMBERS])
    assert sum(len(g) for g in groups) == 7  # every draw trained, once
    for group in groups:
        assert 1 <= len(group) <= 3
        assert len({shape_of(member) for member in group}) == 1
        assert len({member["rnn_type"] for member in group}) == 1
    assert {g[0]["rnn_type"] for g in groups} == {"gru", "lstm"}
    assert any(len(group) > 1 for group in groups)
    # each member is its own Optuna trial, named by the member's id
    trained = {t.user_attrs[_optuna.TUNE_TRIAL_ATTR] for t in _study(tmp_path).trials}
    assert trained == {
        member_id(f"t{i}", m, len(g)) for i, g in enumerate(groups) for m in range(len(g))
    }
    assert {f"t{i}" for i, g in enumerate(groups) if len(g) == 1} <= trained  # its own id


def test_a_search_of_lone_trials_is_groups_of_one_under_their_own_ids(
    tmp_path: Path, signals: Any
) -> None:
    asha = make_scheduler("asha", 8, 2, METRIC, "max")
    search = grouped(tmp_path, "margin_sweep", fuse=1, total=3, scheduler=asha, signals=signals)
    for i in range(3):
        config = search.suggest(f"t{i}")
        assert config is not None and len(config[MEMBERS]) == 1
    for epoch in range(3):  # t1 below the rung's median at epoch 2: stopped
        for i, value in enumerate((10.0, 1.0, 20.0)):
            search.on_trial_result(f"t{i}", _report(epoch, {0: value + epoch}))
    assert stops(signals, "t1") == {0: 2} and stops(signals, "t0") == {}
    trials = {t.user_attrs[_optuna.TUNE_TRIAL_ATTR]: t for t in _study(tmp_path).trials}
    assert sorted(trials) == ["t0", "t1", "t2"]
    assert trials["t1"].state == optuna.trial.TrialState.COMPLETE and trials["t1"].value == 3.0
    search.on_trial_complete("t1", _report(2, {0: 3.0}))
    assert stops(signals, "t1") == {}  # ended: the actor forgets it


def _report(epoch: int, values: dict[int, float], finished: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"epoch": epoch}
    for member, value in values.items():
        result[member_key(member, "epoch")] = epoch
        result[member_key(member, METRIC)] = value
        if finished:
            result[member_key(member, names.FINISHED)] = 1.0
    return result


def test_each_member_is_told_its_own_result_and_stopped_on_its_own(
    tmp_path: Path, signals: Any
) -> None:
    asha = make_scheduler("asha", 8, 2, METRIC, "max")  # rungs at epochs 2 and 4
    search = grouped(tmp_path, "margin_sweep", fuse=3, total=3, scheduler=asha, signals=signals)
    config = search.suggest("t0")
    assert config is not None and len(config[MEMBERS]) == 3  # one shape: one group
    for epoch in (0, 1):
        search.on_trial_result("t0", _report(epoch, {0: 10.0 + epoch, 1: 5.0, 2: 20.0}))
    assert stops(signals, "t0") == {}
    search.on_trial_result("t0", _report(2, {0: 30.0, 1: 5.0, 2: 20.0}))  # the first rung
    assert stops(signals, "t0") == {1: 2}  # below the rung's median at 2
    for epoch in range(3, 8):
        search.on_trial_result("t0", _report(epoch, {0: 30.0 + epoch, 2: 40.0 + epoch}))
    search.on_trial_result("t0", _report(8, {0: 50.0, 2: 60.0}, finished=True))
    search.on_trial_complete("t0", _report(8, {0: 50.0, 2: 60.0}, finished=True))
    trials = {t.user_attrs[_optuna.TUNE_TRIAL_ATTR]: t for t in _study(tmp_path).trials}
    first, stopped, last = (trials[member_id("t0", m, 3)] for m in range(3))
    assert [t.state for t in (first, stopped, last)] == [optuna.trial.TrialState.COMPLETE] * 3
    assert (first.value, stopped.value, last.value) == (50.0, 5.0, 60.0)
    assert sorted(stopped.intermediate_values) == [0, 1, 2]  # step = epoch, to its stop
    assert sorted(first.intermediate_values) == list(range(9))
    assert search.suggest("t1") is Searcher.FINISHED


def test_under_fifo_every_member_runs_to_its_end(tmp_path: Path, signals: Any) -> None:
    search = grouped(
        tmp_path, "margin_sweep", fuse=2, total=2, scheduler=FIFOScheduler(), signals=signals
    )
    search.suggest("t0")
    for epoch in range(8):
        search.on_trial_result("t0", _report(epoch, {0: 1.0, 1: 100.0}))
    assert stops(signals, "t0") == {}
    search.on_trial_complete("t0", _report(7, {0: 1.0, 1: 100.0}))
    values = sorted(float(t.value or 0.0) for t in _study(tmp_path).trials)
    assert values == [1.0, 100.0]


def test_a_saved_searcher_restores_its_groups_in_the_optuna_searchers_checkpoint(
    tmp_path: Path, signals: Any
) -> None:
    """Tune checkpoints the searcher (``save``) and a resumed search restores it: the
    groups, what was drawn and what ended come back, inside the Optuna searcher's own
    checkpoint (no file of ours is unpickled); the signals actor is never saved with it
    (nor with Tune's ``tuner.pkl``): a resumed search sets its own."""
    search = grouped(tmp_path, "mixed", fuse=3, total=7, scheduler=FIFOScheduler(), signals=signals)
    assert pickle.loads(pickle.dumps(search)).signals is None
    first = search.suggest("t0")
    assert first is not None and first is not Searcher.FINISHED
    search.on_trial_complete("t0", None, error=True)
    path = str(tmp_path / "searcher.pkl")
    search.save(path)
    assert "_fused_searcher_state" not in search.inner.__dict__  # saved, not left behind
    (tmp_path / "again").mkdir()
    fresh = grouped(
        tmp_path / "again", "mixed", fuse=3, total=7, scheduler=FIFOScheduler(), signals=signals
    )
    fresh.restore(path)
    assert fresh.signals is signals
    assert (fresh.asked, fresh.groups, fresh.ended) == (search.asked, search.groups, search.ended)
    assert (
        fresh.waiting == search.waiting
        and fresh.inner.__dict__.keys() == search.inner.__dict__.keys()
    )


def test_a_restored_searcher_tells_its_new_actor_the_stops_of_its_running_trials(
    tmp_path: Path, signals: Any
) -> None:
    """What a resumed search relies on, on a real Optuna study: the restored searcher
    tells the new driver's signals actor the stop of every member of a trial that will
    run again (each with its epoch) before any trial does; a trial that completed, none."""
    first = tmp_path / "first"
    first.mkdir()
    asha = make_scheduler("asha", 8, 2, METRIC, "max")  # rungs at epochs 2, 4
    search = grouped(first, "margin_sweep", fuse=2, total=4, scheduler=asha, signals=signals)
    for trial in ("t0", "t1"):
        assert len(search.suggest(trial)[MEMBERS]) == 2
        for epoch in (0, 1, 2):  # member 1 below the median at the rung: stopped
            search.on_trial_result(trial, _report(epoch, {0: 10.0 + epoch, 1: 1.0}))
        assert stops(signals, trial) == {1: 2}
    search.on_trial_complete("t1", _report(2, {0: 12.0}))
    saved = str(tmp_path / "searcher.pkl")
    search.save(saved)
    (tmp_path / "again").mkdir()
    new = start_signals()  # a resumed search's driver: a new actor, knowing nothing
    fresh = grouped(tmp_path / "again", "margin_sweep", 2, 4, FIFOScheduler(), signals=new)
    fresh.restore(saved)
    assert stops(new, "t0") == {1: 2}  # stops after its epoch 2, again
    assert stops(new, "t1") == {}  # it will not run again
    assert fresh.total == 4
    fresh.extend(6)  # a --resume with a larger --num-samples
    assert fresh.total == 6
    fresh.extend(5)  # never fewer
    assert fresh.total == 6


def test_a_trials_last_result_wins_over_a_table_that_ends_before_it() -> None:
    """Tune's results table of a trial (its result.json) can end before the trial did (a
    hard stop's resume keeps it finished from its checkpoint; on a joined cluster Tune
    copies its older table back): the member's end is its trial's last result then,
    never a report the table still holds from before."""
    import pandas as pd
    from ray.tune import Result

    from gridsearch._members import MemberResults

    early = {member_key(0, "epoch"): 1.0, member_key(0, names.BEST_RETRIEVAL): 40.0}
    last = {**early, member_key(0, "epoch"): 2.0, member_key(0, names.FINISHED): 80.0}
    table = pd.DataFrame([{**early, "trial_id": "abc"}])
    stale = Result({**last, "trial_id": "abc"}, None, None, "/nowhere", metrics_dataframe=table)
    (member,) = MemberResults([stale])
    assert member.metrics["epoch"] == 2.0 and names.is_finished(member.metrics)
    whole = pd.DataFrame([{**early, "trial_id": "abc"}, {**last, "trial_id": "abc"}])
    current = Result({**last, "trial_id": "abc"}, None, None, "/nowhere", metrics_dataframe=whole)
    (member,) = MemberResults([current])  # the table's last row, as ever
    assert member.metrics["epoch"] == 2.0 and names.is_finished(member.metrics)
