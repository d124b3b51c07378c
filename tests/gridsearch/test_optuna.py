"""The searcher never trains a config twice: repeats of ended trials reuse their result,
repeats of running ones are drawn again (a real Optuna study in sqlite, driven through
Ray Tune's searcher interface)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from gridsearch import _optuna
from trainables import names


def _search(tmp_path: Path, space: Any, *, metric: Any = "score", mode: Any = "max", seed=0):
    _optuna.quiet()
    return _optuna.ResumableOptunaSearch(
        space=space,
        metric=metric,
        mode=mode,
        sampler=optuna.samplers.RandomSampler(seed=seed),
        study_name="s",
        storage=optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'study.db'}"),
    )


def _two(trial: optuna.Trial) -> None:
    trial.suggest_categorical("rnn", ["gru", "lstm"])


def _stepped(trial: optuna.Trial) -> None:
    # 0.1, 0.2, 0.3 after the space's rounding: draws of 0.21 and 0.19 are one config
    trial.suggest_float("margin", 0.1, 0.3, step=0.1)


def _trained(search: Any) -> list[optuna.trial.FrozenTrial]:
    trials = search._ot_study.get_trials(deepcopy=False)
    return [t for t in trials if _optuna.REPEAT_OF not in t.user_attrs]


@pytest.mark.parametrize("seed", range(5))
def test_a_repeat_of_an_ended_trial_reuses_its_result_and_draws_again(
    tmp_path: Path, seed: int
) -> None:
    search = _search(tmp_path, _stepped, seed=seed)
    seen = []
    for k in range(3):  # the space has exactly 3 configs: each drawn once
        config = search.suggest(f"t{k}")
        assert config not in seen
        seen.append(config)
        search.on_trial_complete(f"t{k}", {"score": 10.0 * k})
    assert sorted(c["margin"] for c in seen) == pytest.approx([0.1, 0.2, 0.3])
    repeats = [t for t in search._ot_study.get_trials() if _optuna.REPEAT_OF in t.user_attrs]
    assert len(repeats) == search.reused and search.redrawn == 0
    values = {t.number: t.value for t in _trained(search)}
    for repeat in repeats:  # told the value of the trial it repeated
        assert repeat.state == optuna.trial.TrialState.COMPLETE
        assert repeat.value == values[repeat.user_attrs[_optuna.REPEAT_OF]]


def test_a_repeat_of_a_running_trial_is_drawn_again_and_left_out_of_the_model(
    tmp_path: Path,
) -> None:
    search = _search(tmp_path, _two, seed=3)
    first = search.suggest("a")  # still running
    second = search.suggest("b")
    assert first != second
    for repeat in search._ot_study.get_trials():
        if _optuna.REPEAT_OF in repeat.user_attrs:
            assert repeat.state == optuna.trial.TrialState.FAIL
            assert repeat.params == first
    assert search.reused == 0
    line = _optuna.repeats_line(search)
    assert (line is None) == (search.redrawn == 0)


def test_a_running_repeat_is_counted_when_the_sampler_insists(tmp_path: Path) -> None:
    # with two values and one running, a seeded random sampler repeats within a few draws
    counts = []
    for seed in range(10):
        (tmp_path / str(seed)).mkdir()
        search = _search(tmp_path / str(seed), _two, seed=seed)
        first, second = search.suggest("a"), search.suggest("b")
        assert first != second
        counts.append(search.redrawn)
    assert sum(counts) > 0  # the redraw path ran


def test_when_every_config_was_tried_the_repeat_is_trained_after_all(tmp_path: Path) -> None:
    search = _search(tmp_path, _two)
    for k in range(2):
        search.suggest(f"t{k}")
        search.on_trial_complete(f"t{k}", {"score": float(k)})
    config = search.suggest("t2")  # nothing new is left
    assert config in ({"rnn": "gru"}, {"rnn": "lstm"})
    assert search.reused == _optuna.MAX_REDRAWS
    assert "reused the ended trial's result" in (_optuna.repeats_line(search) or "")


def test_multi_objective_repeats_reuse_both_values(tmp_path: Path) -> None:
    search = _search(tmp_path, _two, metric=["r10", "sem"], mode=["max", "max"], seed=1)
    search.suggest("t0")
    search.on_trial_complete("t0", {"r10": 60.0, "sem": 0.7})
    search.suggest("t1")
    repeats = [t for t in search._ot_study.get_trials() if _optuna.REPEAT_OF in t.user_attrs]
    assert all(t.values == [60.0, 0.7] for t in repeats)


def test_the_searcher_inside_tune_s_concurrency_limiter_is_read_for_the_line(
    tmp_path: Path,
) -> None:
    from ray.tune.search import ConcurrencyLimiter

    search = _search(tmp_path, _two)
    search.reused, search.redrawn = 2, 1
    line = _optuna.repeats_line(ConcurrencyLimiter(search, max_concurrent=2))
    assert line is not None and line.startswith("3 draw(s) repeated")


_FIXED = {"epochs": 2, "seed": 0, "device": "cpu", "threads": 1}


def _ended_study(storage: str, name: str, space: str, values: list[float]) -> None:
    """A study of ``space`` with one ended trial per value (and one failed, one repeat)."""
    from gridsearch.spaces import get_space

    study = optuna.create_study(
        study_name=name, storage=storage, direction="maximize",
        sampler=optuna.samplers.RandomSampler(seed=1),
    )  # fmt: skip
    draw = _optuna.DefineByRun(get_space(space), _FIXED)
    for value in values:
        trial = study.ask()
        draw(trial)
        study.tell(trial, value)
    failed = study.ask()
    draw(failed)
    study.tell(failed, state=optuna.trial.TrialState.FAIL)
    repeat = study.ask()
    draw(repeat)
    repeat.set_user_attr(_optuna.REPEAT_OF, 0)
    study.tell(repeat, values[0])


def test_a_warm_start_copies_the_ended_trials_that_fit_the_space(tmp_path: Path) -> None:
    from gridsearch.spaces import get_space

    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    _ended_study(storage, "small-world", "margin_sweep", [40.0, 55.0, 61.0])
    _ended_study(storage, "other-space", "lr_bounds", [10.0])
    space = get_space("margin_sweep")
    copied = _optuna.warm_start(
        "small-world", storage, study="big-world", storage_url=storage, modes=["max"],
        space=space, fixed=_FIXED,
    )  # fmt: skip
    assert copied == (3, 1)  # the repeat is left out; the failed one is not an ended trial
    study = optuna.load_study(study_name="big-world", storage=storage)
    warm = study.get_trials()
    assert sorted(t.value for t in warm) == [40.0, 55.0, 61.0]
    assert all(t.user_attrs[_optuna.WARM_START].startswith("small-world#") for t in warm)
    # another space's trials do not fit: lr_max is not a margin_sweep parameter
    assert _optuna.warm_start(
        "other-space", storage, study="big-world-2", storage_url=storage, modes=["max"],
        space=space, fixed=_FIXED,
    ) == (0, 2)  # fmt: skip
    # two objectives cannot start from one
    assert _optuna.warm_start(
        "small-world", storage, study="big-world-3", storage_url=storage,
        modes=["max", "max"], space=space, fixed=_FIXED,
    ) == (0, 4)  # fmt: skip
    with pytest.raises(ValueError, match="no Optuna study 'nothing'"):
        _optuna.warm_start(
            "nothing", storage, study="x", storage_url=storage, modes=["max"], space=space,
            fixed=_FIXED,
        )  # fmt: skip


def test_a_warm_started_config_is_trained_again_not_reused(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    choice = optuna.distributions.CategoricalDistribution(["gru", "lstm"])
    for rnn in ("gru", "lstm"):
        study.add_trial(
            optuna.trial.create_trial(
                params={"rnn": rnn},
                distributions={"rnn": choice},
                value=1.0,
                user_attrs={_optuna.WARM_START: "earlier#0"},
            )
        )
    search = _search(tmp_path, _two)
    config = search.suggest("t0")
    assert config in ({"rnn": "gru"}, {"rnn": "lstm"})
    assert search.reused == search.redrawn == 0  # the other search's result is not ours


# -- links to Tune and MLflow, names and steps -------------------------------------------


@pytest.mark.parametrize(
    ("objective", "names"),
    [
        ("retrieval", ["dev/r10_mean_best"]),
        ("semantic", ["dev/semantic_best"]),
        ("both", ["dev/r10_mean_best", "dev/semantic_best"]),
    ],
)
def test_the_study_names_its_objectives_after_the_metrics(
    tmp_path: Path, objective: str, names: list[str]
) -> None:
    from gridsearch.settings import OBJECTIVES
    from gridsearch.spaces import get_space

    _optuna.quiet()
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    metric, mode = OBJECTIVES[objective]
    sampler = optuna.samplers.RandomSampler(seed=0)
    space = get_space("margin_sweep")
    for _ in range(2):  # created, then loaded again by a --resume
        _optuna.searcher(
            space, _FIXED, sampler, metric=metric, mode=mode, study="s",
            storage_url=storage, max_concurrent=1,
        )  # fmt: skip
        study = optuna.load_study(study_name="s", storage=storage)
        assert study.metric_names == names


def test_each_trained_trial_names_its_tune_trial_and_a_repeat_does_not(tmp_path: Path) -> None:
    search = _search(tmp_path, _stepped, seed=0)
    for k in range(3):
        search.suggest(f"t{k}")
        search.on_trial_complete(f"t{k}", {"score": float(k)})
    trials = search._ot_study.get_trials()
    tune_ids = [t.user_attrs.get(_optuna.TUNE_TRIAL_ATTR) for t in _trained(search)]
    assert tune_ids == ["t0", "t1", "t2"]
    repeats = [t for t in trials if _optuna.REPEAT_OF in t.user_attrs]
    assert repeats and all(_optuna.TUNE_TRIAL_ATTR not in t.user_attrs for t in repeats)


def test_intermediate_values_are_reported_at_step_equal_to_epoch(tmp_path: Path) -> None:
    search = _search(tmp_path, _two)
    search.suggest("t0")
    for epoch in range(3):  # as Tune reports them: epoch 0 (untrained) is iteration 1
        search.on_trial_result("t0", {"score": 10.0 + epoch, "epoch": epoch,
                                      "training_iteration": epoch + 1})  # fmt: skip
    search.on_trial_result("t0", {"score": 99.0, "epoch": 2, "training_iteration": 4})  # again
    search.on_trial_complete("t0", {"score": 12.0, "epoch": 2})
    [trial] = search._ot_study.get_trials()
    assert trial.intermediate_values == {0: 10.0, 1: 11.0, 2: 12.0}  # the first report wins


def test_an_intermediate_value_is_the_epochs_own_and_the_trials_value_its_best(
    tmp_path: Path,
) -> None:
    """A search on the running best (``dev/r10_mean_best``) reports each epoch's own
    ``dev/r10_mean`` to Optuna, so a drop shows (68.45 then 61.6); the trial's value
    stays the best it reached, which the search selects on."""
    best, own = names.BEST_RETRIEVAL, names.PRIMARY_RETRIEVAL
    search = _search(tmp_path, _two, metric=best)
    search.suggest("t0")
    for epoch, (value, best_so_far) in enumerate(((40.0, 40.0), (68.45, 68.45), (61.6, 68.45))):
        search.on_trial_result("t0", {own: value, best: best_so_far, "epoch": epoch})
    search.on_trial_complete("t0", {own: 61.6, best: 68.45, "epoch": 2})
    [trial] = search._ot_study.get_trials()
    assert trial.intermediate_values == {0: 40.0, 1: 68.45, 2: 61.6}
    assert trial.value == 68.45


def test_the_link_gives_a_running_trial_its_mlflow_run_and_leaves_an_ended_one(
    tmp_path: Path,
) -> None:
    search = _search(tmp_path, _two)
    search.suggest("t0")
    search.suggest("t1")
    search.on_trial_complete("t1", {"score": 1.0})
    links = _optuna.StudyLinks("s", f"sqlite:///{tmp_path / 'study.db'}")
    assert links.link("t0", "run-0") == 0
    assert links.link("t0", "run-0") == 0  # again (a --resume): the same
    assert links.link("t1", "run-1") == 1  # its number, but Optuna keeps it as it ended
    assert links.link("nobody", "run-2") is None
    attrs = [t.user_attrs for t in search._ot_study.get_trials()]
    assert attrs[0] == {_optuna.TUNE_TRIAL_ATTR: "t0", _optuna.MLFLOW_RUN_ATTR: "run-0"}
    assert attrs[1] == {_optuna.TUNE_TRIAL_ATTR: "t1"}
