"""The strategies bench's bookkeeping: what a search costs with k seeds per config, which
config it would pick, and how that pick does at the training seeds it never saw."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import _strategies as strategies
from bench import tabular
from bench._cli import BadInput
from bench._strategies.catalogue import EveryDrawSearch, _bohb
from bench._strategies.events import SavedSearches
from trainables import names

R, S = names.BEST_RETRIEVAL, names.BEST_SEMANTIC
ENSEMBLE_SEMANTIC = names.key(names.ENSEMBLE, "semantic")


def _curve(
    variant: str, seed: int, values: list[float], final: float, semantic: float = 0.5
) -> tabular.Curve:
    """Dev R@10 ``values`` per epoch and the ensemble's test R@10 ``final``; the dev
    semantic score rising to ``semantic`` (its best: a tenth of it at epoch 1), the
    ensemble's test semantic score ``semantic`` - 0.01."""
    epochs: list[dict[str, float]] = [
        {"epoch": e, names.PRIMARY_RETRIEVAL: v, R: max(values[: e + 1]), "time/train_s": 1.0,
         names.PRIMARY_SEMANTIC: semantic * e / (len(values) - 1),
         S: semantic * e / (len(values) - 1)}
        for e, v in enumerate(values)
    ]  # fmt: skip
    epochs[-1][names.FINISHED] = final
    epochs[-1][ENSEMBLE_SEMANTIC] = semantic - 0.01
    config = {"variant": variant, "margin": 0.2, "seed": seed}
    return tabular.Curve(variant, 0.2, seed, config, epochs)


# dev semantic at the last epoch per seed: c best at seed 0 only (luck), a good everywhere
SEMANTIC = {"a": [0.60, 0.70, 0.72], "b": [0.40, 0.41, 0.42], "c": [0.80, 0.30, 0.31]}


def _table(seeds: int = 3) -> tabular.RecordedTable:
    # a: best at seed 0 only (luck); b: good everywhere; c: poor everywhere
    finals = {"a": [60.0, 40.0, 41.0], "b": [55.0, 54.0, 56.0], "c": [30.0, 31.0, 29.0]}
    curves = [
        _curve(v, s, [0.0, f[s] / 2, f[s]], final=f[s] + 1, semantic=SEMANTIC[v][s])
        for v, f in finals.items()
        for s in range(seeds)
    ]
    return tabular.RecordedTable(curves, {"variants": {v: {} for v in finals}})


def _events(picks: list[tuple[str, float]], cost: int = 1) -> strategies.Events:
    """A search that reported epochs 0-2 of each variant in turn at seed-0 values (its
    dev semantic score: the table's, seed 0)."""
    reports = [
        (v, e, value * e / 2, SEMANTIC.get(v, [0.0])[0] * e / 2)
        for v, value in picks
        for e in range(3)
    ]
    return strategies.Events(reports, {v: (v, 0.2) for v, _ in picks}, cost)


def test_cost_counts_every_seed_of_a_report() -> None:
    one, two = _events([("c", 30.0), ("a", 60.0)]), _events([("c", 30.0), ("a", 60.0)], cost=2)
    assert one.curve(R) == [15.0, 30.0, 30.0, 60.0]
    assert two.curve(R) == [15.0, 15.0, 30.0, 30.0, 30.0, 30.0, 60.0, 60.0]
    assert len(two.incumbents(R)) == len(two.curve(R))
    # the semantic objective's curve: c's 0.8 found first, a's 0.6 never beats it
    assert one.curve(S) == pytest.approx([0.4, 0.8, 0.8, 0.8])
    with pytest.raises(ValueError, match="reports hold"):
        one.curve(names.FINISHED)  # a test value is nothing a search selects on


def test_the_pick_is_valued_at_the_seeds_the_search_never_saw() -> None:
    table = _table()
    events = _events([("c", 30.0), ("a", 60.0), ("b", 55.0)])
    assert [p[0] for p in events.incumbents(R)] == ["c", "c", "c", "a", "a", "a"]
    [curve] = strategies.heldout_curves(table, [(0, events)], "retrieval", seeds_per_config=1)
    # unseen: seeds 1 and 2; ensemble values (final + 1): a 41.0/42.0, b 55.0/57.0, c 32/30
    best = (55.0 + 57.0) / 2
    assert curve[:3] == [pytest.approx(100 * 31.0 / best)] * 3
    assert curve[3:] == [pytest.approx(100 * 41.5 / best)] * 3  # a: seed 0's luck
    # two seeds per config: only seed 2 is unseen; a search that saw all has no curve
    [k2] = strategies.heldout_curves(table, [(0, events)], "retrieval", seeds_per_config=2)
    assert k2[-1] == pytest.approx(100 * 42.0 / 57.0)
    assert strategies.heldout_curves(table, [(0, events)], "retrieval", 3) == []


def test_the_semantic_pick_is_valued_by_its_ensemble_s_test_semantic_score() -> None:
    """The semantic objective picks on the dev semantic score (c's lucky 0.8 at seed 0,
    not a's R@10) and values the pick by its ensemble's test semantic score at the
    unseen seeds (the table's semantic - 0.01), as a % of the best config's there."""
    table = _table()
    events = _events([("a", 60.0), ("c", 30.0), ("b", 55.0)])
    assert [p[0] for p in events.incumbents(S)] == ["a", "a", "a", "c", "c", "c"]
    [curve] = strategies.heldout_curves(table, [(0, events)], "semantic", seeds_per_config=1)
    best = (0.69 + 0.71) / 2  # a, at seeds 1 and 2
    assert curve[:3] == [pytest.approx(100.0)] * 3
    assert curve[3:] == [pytest.approx(100 * (0.29 + 0.30) / 2 / best)] * 3  # c: luck
    [k2] = strategies.heldout_curves(table, [(0, events)], "semantic", seeds_per_config=2)
    assert k2[-1] == pytest.approx(100 * 0.30 / 0.71)  # only seed 2 unseen
    with pytest.raises(ValueError, match="2 metrics, not one"):
        strategies.heldout_curves(table, [(0, events)], "both", seeds_per_config=1)


def test_seed_runs_wrap_in_the_table_order() -> None:
    table = _table()
    assert table.seed_run(0, 2) == [0, 1] and table.seed_run(2, 2) == [2, 0]
    with pytest.raises(ValueError, match="the table has 3"):
        table.seed_run(0, 4)


@pytest.mark.parametrize("objective", ["retrieval", "semantic"])
def test_the_default_strategies_leave_out_what_ours_already_is(objective: str) -> None:
    short = strategies.default_strategies(objective, epochs=4, warm_table=False)
    assert "ours-fifo" not in short and "ours-asha" in short and "ours-warm-table" not in short
    long = strategies.default_strategies(objective, epochs=8, warm_table=True)
    assert "ours-asha" not in long and "ours-fifo" in long and "ours-warm-table" in long
    assert strategies.scheduler_of("ours-k2", 4, objective) == "fifo"
    # the GP sampler: FIFO at 4 epochs as the driver's auto picks, or ASHA
    assert strategies.scheduler_of("ours-gp", 4, objective) == "fifo"
    assert strategies.scheduler_of("ours-gp-asha", 4, objective) == "asha"
    assert strategies.scheduler_of("optuna-median", 4, objective) == "pruner"
    assert {"optuna-median", "optuna-hyperband"} <= set(short)
    assert strategies.known(objective) == strategies.STRATEGIES


def test_ours_schedules_as_the_driver_s_auto_does_for_each_objective() -> None:
    from gridsearch import resolve_scheduler
    from gridsearch.settings import OBJECTIVES

    for objective in OBJECTIVES:
        for epochs in (2, 4, 8, 32):
            ours = "ours-both" if objective == "both" else "ours"
            driver = resolve_scheduler("auto", objective, epochs)
            assert strategies.scheduler_of(ours, epochs, objective) == driver
    assert strategies.scheduler_of("ours-both", 4, "both") == "asha"  # Pareto halving
    assert strategies.default_strategies("both", 4, False) == list(strategies.BOTH)


# one strategy of each way build() makes them, per objective that is not the default
BUILT = {
    "semantic": ("ours", "random-asha", "tpe-fifo", "grid", "hyperband", "bohb", "optuna-median"),
    "both": ("ours-both", "motpe-fifo"),
}


@pytest.mark.parametrize("objective", list(BUILT))
def test_every_strategy_selects_on_its_objective_s_metric(objective: str, tmp_path: Path) -> None:
    """Each way of building a strategy gives its searcher (and pruner) the objective's
    metric or metrics and mode(s), as the driver's are given them (``OBJECTIVES``)."""
    from gridsearch.settings import OBJECTIVES

    metric, mode = OBJECTIVES[objective]
    table = tabular.RecordedTable.read(RECORDED / "paper_margin")
    db = f"sqlite:///{tmp_path / 'studies.db'}"
    for name in BUILT[objective]:
        if name == "bohb" and importlib.util.find_spec("hpbandster") is None:
            continue
        search, scheduler, _ = strategies.build(name, table, 0, 4, name, db, objective)
        assert (search.searcher.metric, search.searcher.mode) == (metric, mode), name
        if isinstance(scheduler, strategies.OptunaPruning):
            assert scheduler.objective == metric
    with pytest.raises(ValueError, match="unknown strategy 'motpe-fifo' for --objective"):
        strategies.build("motpe-fifo", table, 0, 4, "s", db, "semantic")


class _Trial:
    def __init__(self, trial_id: str) -> None:
        self.trial_id = trial_id


def _epochs(pruning: strategies.OptunaPruning, trial: str, values: list[float]) -> list[str]:
    """What the scheduler says to each of ``values`` (epochs 0, 1, ...) of ``trial``,
    until it stops it; a trial it never stops completes with its last value."""
    said = []
    for epoch, value in enumerate(values):
        said.append(pruning.on_trial_result(None, _Trial(trial), {"epoch": epoch, R: value}))
        if said[-1] == "STOP":
            return said
    pruning.on_trial_complete(None, _Trial(trial), {"epoch": len(values) - 1, R: values[-1]})
    return said


def test_an_optuna_pruner_judges_tune_s_trials_as_in_its_own_study() -> None:
    optuna = pytest.importorskip("optuna")
    pruning = strategies.OptunaPruning(optuna.pruners.MedianPruner(n_startup_trials=2), R, "max")
    for trial in "abcdef":
        pruning.on_trial_add(None, _Trial(trial))
    # nothing is pruned before two trials have completed, nor ever at epoch 0
    assert _epochs(pruning, "a", [0.0, 10.0, 20.0, 30.0]) == ["CONTINUE"] * 4
    assert _epochs(pruning, "b", [99.0, 1.0, 2.0, 3.0]) == ["CONTINUE"] * 4
    # the median of the completed trials at epoch 1 is 5.5, at epoch 2 11.0
    assert _epochs(pruning, "c", [0.0, 5.0]) == ["CONTINUE", "STOP"]
    assert _epochs(pruning, "d", [0.0, 6.0, 10.0]) == ["CONTINUE", "CONTINUE", "STOP"]
    assert _epochs(pruning, "e", [0.0, 50.0, 60.0, 70.0]) == ["CONTINUE"] * 4
    assert pruning.pruned == {"c": 1, "d": 2}
    states = [t.state.name for t in pruning.study.trials]
    assert states == ["COMPLETE", "COMPLETE", "PRUNED", "PRUNED", "COMPLETE", "RUNNING"]
    pruning.on_trial_error(None, _Trial("f"))
    assert pruning.study.trials[-1].state.name == "FAIL"
    assert [t.value for t in pruning.study.trials[:2]] == [30.0, 3.0]


@pytest.fixture(scope="module")
def joined(ray_address: str) -> Iterator[None]:
    """This process joined to the session's Ray cluster once, for every replay of the
    module: one driver's start and shutdown instead of one per search."""
    import ray

    ray.init(address=ray_address, log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()


def _replayed(
    name: str, table: tabular.RecordedTable, scratch: Path, **options: Any
) -> strategies.Events:
    """One real search of strategy ``name`` (search seed 0) on the session's Ray cluster,
    which this process has joined (``joined``); on the retrieval objective unless
    ``options`` say otherwise."""
    options.setdefault("objective", "retrieval")
    return strategies.run_one(name, table, 0, time_scale=0.0, scratch=scratch, **options)


@pytest.mark.slow
def test_a_two_seed_replay_reports_the_seeds_mean_and_pays_for_both(
    tmp_path: Path, joined: None
) -> None:
    table = _table(seeds=2)
    events = _replayed("ours-k2", table, tmp_path, budget=8, concurrent=1)
    assert events.cost == 2
    trained = [r for r in events.reports if r[1] >= 1]
    assert len(trained) == 4  # budget 8 trial-epochs = 2 trials x 2 epochs x 2 seeds
    for trial, epoch, value, _ in events.reports:
        variant, _ = events.configs[trial]
        both = [table.curve(variant, 0.2, s).epochs[epoch][R] for s in (0, 1)]
        assert value == pytest.approx(sum(both) / 2)


def test_a_k_seed_search_is_measured_against_the_grid_s_best_mean() -> None:
    table = _table()
    # the best mean over seeds 0 and 1: b, (55 + 54) / 2 = 54.5 (a's 60 at seed 0 is luck)
    events = _events([("b", 54.5)], cost=2)
    [curve] = strategies.percent_curves(table, [(0, events)], "retrieval", k=2)
    assert curve[-1] == pytest.approx(100.0)
    [one] = strategies.percent_curves(table, [(0, _events([("b", 55.0)]))], "retrieval")
    assert one[-1] == pytest.approx(100 * 55.0 / 60.0)  # one seed: against a's lucky 60
    # the semantic objective: against the grid's best dev semantic score, c's lucky 0.8
    # at seed 0; over seeds 0 and 1, a's mean 0.65
    [semantic] = strategies.percent_curves(table, [(0, _events([("a", 1.0)]))], "semantic")
    assert semantic[-1] == pytest.approx(100 * 0.60 / 0.80)
    [k2] = strategies.percent_curves(table, [(0, _events([("a", 1.0)], 2))], "semantic", k=2)
    assert k2[-1] == pytest.approx(100 * 0.60 / 0.65)


RECORDED = Path(__file__).resolve().parents[2] / "bench" / "recorded"


def test_the_parts_form_draws_each_parameter_as_the_driver_s_spaces_do() -> None:
    optuna = pytest.importorskip("optuna")
    table = tabular.RecordedTable.read(RECORDED / "lr_batch")
    parts = strategies.Parts(table)
    d = parts.distributions()
    assert d["model"].choices == ("lstm-64-attention", "gru-32-max")
    assert d["lr_max"].log and d["lr_max"].low == pytest.approx(1e-3 / 2**0.5)
    assert d["lr_max"].high == pytest.approx(8e-3 * 2**0.5)
    assert isinstance(d["lr_min"], optuna.distributions.CategoricalDistribution)
    assert d["batch_size"].choices == (32, 64, 128)
    for variant, margin in table.configs():  # every recorded config is one draw's
        assert parts.decode(parts.params_of(variant, margin)) == (variant, margin)
    # each recorded lr_max owns an equal share of the log axis: 2e-3 from 2e-3/sqrt(2)
    base = parts.params_of(table.variants[0], 0.25)
    low, high = (parts.decode({**base, "lr_max": v})[0] for v in (1.42e-3, 2.8e-3))
    assert low == high and "lr2e-03" in low
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(400):
        trial = study.ask()
        config = parts(trial)
        seen.add(parts.decode({**trial.params, **config}))
        assert config["lr_max"] in (1e-3, 2e-3, 4e-3, 8e-3)  # the recorded value drawn
        study.tell(trial, 0.0)
    assert seen == set(table.configs())


def test_the_parts_form_searches_evenly_spaced_margins_on_their_step() -> None:
    table = tabular.RecordedTable.read(RECORDED / "paper_margin")
    d = strategies.Parts(table).distributions()
    assert (d["margin"].low, d["margin"].high, d["margin"].step) == (0.05, 0.5, 0.05)
    assert len(d["model"].choices) == 8


def test_the_parts_form_needs_every_model_x_parameter_combination() -> None:
    table = _table()
    table.manifest = {"variants": {
        "a/x": {"lr_max": 1e-3, "batch_size": 32}, "a/y": {"lr_max": 2e-3, "batch_size": 32},
        "b/x": {"lr_max": 1e-3, "batch_size": 32}, "c/z": {"lr_max": 1e-3, "batch_size": 64},
    }}  # fmt: skip
    table.variants = tuple(table.manifest["variants"])
    with pytest.raises(ValueError, match="not every model x parameter combination"):
        strategies.Parts(table)


@pytest.mark.slow
def test_a_parts_form_search_replays_the_recorded_configs_it_decodes(
    tmp_path: Path, joined: None
) -> None:
    table = tabular.RecordedTable.read(RECORDED / "lr_batch")
    events = _replayed("ours", table, tmp_path, budget=12, concurrent=1, form="parts")
    assert sum(r[1] >= 1 for r in events.reports) >= 12
    assert len(set(events.configs.values())) >= 3
    for trial, epoch, value, _ in events.reports:
        variant, margin = events.configs[trial]
        assert value == table.curve(variant, margin, table.seeds[0]).epochs[epoch][R]


@pytest.mark.slow
def test_a_replayed_search_stops_what_optuna_s_median_pruner_prunes(
    tmp_path: Path, joined: None
) -> None:
    """Real Tune on the replay, one trial at a time: a trial stops exactly where its value
    of the objective (here the semantic one: the best dev semantic score) falls below the
    median of the trials completed before it at that epoch (Optuna's MedianPruner, 5
    completed trials before it prunes anything)."""
    table = tabular.RecordedTable.read(RECORDED / "lr_batch")
    options: dict[str, Any] = {"budget": 60, "concurrent": 1, "objective": "semantic"}
    events = _replayed("optuna-median", table, tmp_path, **options)
    by_trial: dict[str, list[float]] = {}
    for trial, epoch, value in events.values(S):
        assert epoch == len(by_trial.setdefault(trial, []))  # in order, one at a time
        by_trial[trial].append(value)
    completed: list[list[float]] = []
    stopped = 0
    for trial, values in by_trial.items():  # in the order the trials ran
        if trial == events.reports[-1][0]:
            break  # the last may have been cut by the budget
        pruned_at = None
        for epoch in range(1, len(values)):
            if len(completed) >= 5:
                ordered = sorted(c[epoch] for c in completed)
                half = len(ordered) // 2
                median = (
                    ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2
                )
                if values[epoch] < median:
                    pruned_at = epoch
                    break
        assert len(values) - 1 == (table.max_epoch if pruned_at is None else pruned_at), trial
        if pruned_at is None:
            completed.append(values)
        else:
            stopped += 1
    assert stopped >= 1 and len(completed) >= 5  # the rule was exercised both ways


def test_saved_searches_come_back_only_for_the_same_settings(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    key = {"table_sha256": "abc", "form": "parts", "budget": 96, "startup": None}
    events = _events([("c", 30.0), ("a", 60.0)])
    SavedSearches(path, key).add("ours", 3, events)
    SavedSearches(path, {**key, "budget": 48}).add("ours", 3, _events([]))
    again = SavedSearches(path, key)
    assert again.get("ours", 3) == events and again.get("ours", 4) is None
    assert again.get("tpe-fifo", 3) is None
    assert SavedSearches(path, {**key, "budget": 48}).get("ours", 3) is not None
    assert SavedSearches(path, {**key, "form": "variant"}).found == {}
    SavedSearches(None, key).add("ours", 3, events)  # keeps nothing
    path.write_text(path.read_text() + '{"key": {}, "strategy": "ours"}\n')
    with pytest.raises(BadInput, match=r"--results .*: line 3 is not a saved"):
        SavedSearches(path, key)


def test_bohb_draws_every_recorded_config_of_a_stepped_margin() -> None:
    pytest.importorskip("hpbandster")
    table = tabular.RecordedTable.read(RECORDED / "paper_margin")
    search, _, _ = _bohb(table, {}, 0, table.max_epoch, 2, "retrieval", form="parts")
    space = search.searcher._space  # hpbandster takes no ordinals: a float, snapped
    decode = strategies.Parts(table).decode
    seen = {decode(dict(c)) for c in space.sample_configuration(2000)}
    assert seen == set(table.configs())


def test_the_stock_searcher_trains_every_draw_as_ray_s_does(tmp_path: Path) -> None:
    """``EveryDrawSearch`` (the stock strategies', ours-repeats'): a repeat of a config is
    trained, as Ray's OptunaSearch trains it; each draw is marked with its Tune trial."""
    import optuna

    from gridsearch import quiet

    quiet()

    def two(trial: optuna.Trial) -> None:
        trial.suggest_categorical("rnn", ["gru", "lstm"])

    search = EveryDrawSearch(
        space=two,
        metric="score",
        mode="max",
        sampler=optuna.samplers.RandomSampler(seed=0),
        study_name="s",
        storage=optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'study.db'}"),
    )
    drawn = []
    for k in range(6):
        drawn.append(search.suggest(f"t{k}"))
        search.on_trial_complete(f"t{k}", {"score": float(k)})
    trials = search._ot_study.get_trials()
    assert len(trials) == 6 and search.reused == search.redrawn == 0
    assert len({c["rnn"] for c in drawn}) < len(drawn)  # repeats were trained
    assert [t.user_attrs["tune_trial_id"] for t in trials] == [f"t{k}" for k in range(6)]


def test_what_tune_pickles_still_pickles_after_ray_replaces_print(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """bench travels to Ray's workers by value, every module of it whole; once the driver
    has shown a worker's death, Ray's tqdm_ray has replaced builtins.print, and a module
    holding the original (as a default argument) no longer pickles: every later search
    of a comparison failed at its start."""
    import builtins

    from ray import cloudpickle

    from bench._strategies import catalogue, curves, events, problem, pruning

    original = builtins.print
    monkeypatch.setattr(builtins, "print", lambda *a, **k: original(*a, **k))
    # what Tune saves of a replayed search: its stopper and callback (and with them
    # bench.tabular, whole), and every module its searcher, scheduler and trainable come from
    stopper = cloudpickle.loads(cloudpickle.dumps(events.Budget(4, events.Recorder(S))))
    assert stopper.budget == 4 and stopper.recorder.required == {S}
    for module in (catalogue, curves, events, problem, pruning, tabular):
        cloudpickle.dumps(module)
