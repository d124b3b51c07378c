"""One whole search of one strategy on the recorded problem, in real Ray Tune."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
from optuna.distributions import BaseDistribution
from ray import cloudpickle, tune

import bench
from bench import tabular
from bench._strategies.catalogue import SEEDS_PER_CONFIG, build, scheduler_of
from bench._strategies.events import Budget, Events, Recorder
from bench._strategies.problem import Parts, decoder, space
from bench._strategies.pruning import direction
from gridsearch import warm_start
from gridsearch.settings import OBJECTIVES, first_objective

# The replay trainable and the problem's decoder travel to Ray's workers by value: they
# need not find bench/ on their path.
cloudpickle.register_pickle_by_value(bench)


def run_one(
    name: str,
    table: tabular.RecordedTable,
    seed: int,
    budget: int,
    time_scale: float,
    scratch: Path,
    *,
    objective: str,
    trials: int | None = None,
    concurrent: int = 2,
    warm_from: Events | None = None,
    form: str = "variant",
    startup: int | None = None,
) -> Events:
    """One whole search of strategy ``name`` with search seed ``seed``, selecting on
    ``objective`` (the driver's ``--objective``: Tune is told its first metric, as the
    driver tells it): ``trials`` of them (default: as many as the budget can pay for,
    whole ones or one epoch each), ``concurrent`` at a time; ``startup``: see
    :func:`build`."""
    cost = SEEDS_PER_CONFIG.get(name, 1)
    if trials is None:
        kind = scheduler_of(name, table.max_epoch, objective)
        fifo = kind == "fifo" and name not in ("hyperband", "bohb")
        trials = math.ceil(budget / (cost * table.max_epoch)) if fifo else budget
    label = f"{name}-{seed}"
    scratch.mkdir(parents=True, exist_ok=True)
    db = f"sqlite:///{scratch / label}.db"
    if warm_from is not None:
        warm_start_from(table, warm_from, label, db, objective, form)
    search, scheduler, fixed = build(
        name, table, seed, trials, label, db, objective, concurrent, form, startup
    )
    decode = decoder(table, form)
    recorder = Recorder(OBJECTIVES[objective][0], decode)
    metric, mode = first_objective(objective)
    param_space = fixed if name == "bohb" else None
    stopper = Budget(budget, recorder, cost)
    tuner = tune.Tuner(
        tune.with_parameters(
            tabular.replay_trainable,
            table=table,
            time_scale=time_scale,
            seeds_per_config=cost,
            decode=decode,
        ),
        param_space=param_space,
        tune_config=tune.TuneConfig(
            search_alg=search,
            scheduler=scheduler,
            num_samples=trials,
            metric=metric,
            mode=mode,
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name=label,
            storage_path=str(scratch / "tune"),
            callbacks=[recorder],
            stop=stopper,
            verbose=0,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
        ),
    )
    results = tuner.fit()
    if results.errors:
        raise RuntimeError(f"{label}: {len(results.errors)} trial(s) failed: {results.errors[0]}")
    return Events(recorder.reports, recorder.configs, cost)


def warm_start_from(
    table: tabular.RecordedTable,
    earlier: Events,
    study: str,
    db: str,
    objective: str,
    form: str = "variant",
) -> None:
    """The study ``study`` started, through ``gridsearch.warm_start``, from the
    trials of an earlier search (each trial's last value of ``objective``'s metric, one
    objective's: the warm strategies are ours')."""
    metric, mode = OBJECTIVES[objective]
    assert isinstance(metric, str) and isinstance(mode, str), "one objective"
    parts = Parts(table) if form == "parts" else None
    choices: dict[str, BaseDistribution] = parts.distributions() if parts else {
        "variant": optuna.distributions.CategoricalDistribution(table.variants),
        "margin": optuna.distributions.CategoricalDistribution(table.margins),
    }  # fmt: skip
    source = optuna.create_study(
        study_name=f"{study}-earlier", storage=db, direction=direction(mode)
    )
    last: dict[str, float] = {}
    for trial, _, value in earlier.values(metric):
        last[trial] = value
    for trial, value in last.items():
        variant, margin = earlier.configs[trial]
        params = parts.params_of(variant, margin) if parts else {"variant": variant,
                                                                 "margin": margin}  # fmt: skip
        source.add_trial(
            optuna.trial.create_trial(params=params, distributions=choices, value=value)
        )
    fixed = {"epochs": table.max_epoch, "seed": 0, "device": "cpu", "threads": 1}
    warm_start(
        f"{study}-earlier", db, study=study, storage_url=db, modes=[mode],
        space=space(table, form=form), fixed=fixed,
    )  # fmt: skip
