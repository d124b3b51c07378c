"""The strategies: each one's search algorithm, scheduler and config constants."""

from __future__ import annotations

from typing import Any

import optuna
from ray.tune.schedulers import FIFOScheduler, HyperBandScheduler, TrialScheduler
from ray.tune.search.optuna import OptunaSearch

from bench import tabular
from bench._strategies.problem import Parts, space
from bench._strategies.pruning import OptunaPruning, optuna_pruner
from gridsearch import (
    ResumableOptunaSearch,
    SpaceFillingSampler,
    make_sampler,
    make_scheduler,
    resolve_scheduler,
    searcher,
)
from gridsearch.spaces import SearchSpace
from trainables import names

STRATEGIES = (
    "ours", "ours-asha", "ours-fifo", "ours-repeats", "ours-warm", "ours-warm-table",
    "ours-k2", "ours-gp", "ours-gp-asha", "random-asha", "tpe-fifo", "grid", "hyperband", "bohb",
    "optuna-median", "optuna-hyperband",
)  # fmt: skip
OURS = ("ours", "ours-asha", "ours-fifo", "ours-repeats", "ours-warm", "ours-warm-table",
        "ours-k2", "ours-gp", "ours-gp-asha")  # fmt: skip
SEEDS_PER_CONFIG = {"ours-k2": 2}
BOTH = ("ours-both", "ours-both-fifo", "motpe-fifo")  # --objective both
BOTH_METRICS, BOTH_MODES = [names.BEST_RETRIEVAL, names.BEST_SEMANTIC], ["max", "max"]


def scheduler_of(name: str, epochs: int) -> str:
    """ "asha", "fifo" or "pruner" (an Optuna pruner's): the scheduler strategy ``name``
    runs with at ``epochs``."""
    if name in OURS:
        explicit = {"ours-asha": "asha", "ours-gp-asha": "asha", "ours-fifo": "fifo"}.get(name)
        return explicit or resolve_scheduler("auto", "retrieval", epochs)
    if name in ("ours-both", "ours-both-fifo"):
        return resolve_scheduler("auto" if name == "ours-both" else "fifo", "both", epochs)
    if name.startswith("optuna-"):
        return "pruner"
    return "fifo" if name in ("tpe-fifo", "grid", "motpe-fifo") else "asha"


def default_strategies(both: bool, epochs: int, warm_table: bool) -> list[str]:
    """Every strategy, less the explicit ours-asha/ours-fifo that ``ours`` already is, and
    ours-warm-table without ``--warm-table``."""
    if both:
        return list(BOTH)
    same = "ours-" + scheduler_of("ours", epochs)
    return [s for s in STRATEGIES if s != same and (warm_table or s != "ours-warm-table")]


class EveryDrawSearch(ResumableOptunaSearch):
    """Trains whatever the sampler draws, a repeat of an earlier config included, as Ray's
    OptunaSearch does (the driver's searcher skips repeats): the stock strategies' and
    ours-repeats'."""

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        return self._trained_as(trial_id, OptunaSearch.suggest(self, trial_id))


def _searcher(
    space: SearchSpace,
    fixed: dict[str, Any],
    sampler: Any,
    study: str,
    db: str,
    concurrent: int,
    skip_repeats: bool = False,
    both: bool = False,
) -> Any:
    """The driver's searcher (``skip_repeats``); the stock strategies train every draw,
    as Ray's OptunaSearch does (``EveryDrawSearch``). ``both``: the two objectives."""
    return searcher(
        space,
        fixed,
        sampler,
        metric=BOTH_METRICS if both else names.BEST_RETRIEVAL,
        mode=BOTH_MODES if both else "max",
        study=study,
        storage_url=db,
        max_concurrent=concurrent,
        algorithm=ResumableOptunaSearch if skip_repeats else EveryDrawSearch,
    )


def _bohb(
    table: tabular.RecordedTable,
    fixed: dict[str, Any],
    seed: int,
    epochs: int,
    concurrent: int,
    form: str = "variant",
) -> tuple[Any, TrialScheduler, dict[str, Any]]:
    import ConfigSpace as CS
    from ray.tune.schedulers import HyperBandForBOHB
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.bohb import TuneBOHB

    config_space = CS.ConfigurationSpace(seed=seed)
    if form == "parts":  # the same parameters, decoded by the replay as the others are
        for key, d in Parts(table).distributions().items():
            if isinstance(d, optuna.distributions.CategoricalDistribution):
                config_space.add(CS.CategoricalHyperparameter(key, list(d.choices)))
                continue
            assert isinstance(d, optuna.distributions.FloatDistribution)  # Parts' only other
            if d.step:  # hpbandster takes no ordinals: a float whose draws Parts.decode
                # snaps to the nearest step, each step owning an equal share of the range
                half = d.step / 2
                config_space.add(CS.UniformFloatHyperparameter(key, d.low - half, d.high + half))
            else:
                config_space.add(CS.UniformFloatHyperparameter(key, d.low, d.high, log=d.log))
    else:
        config_space.add(CS.CategoricalHyperparameter("variant", list(table.variants)))
        config_space.add(CS.CategoricalHyperparameter("margin", list(table.margins)))
    search = TuneBOHB(config_space, metric=names.BEST_RETRIEVAL, mode="max", seed=seed)
    scheduler = HyperBandForBOHB(time_attr="epoch", max_t=epochs, reduction_factor=2)
    return ConcurrencyLimiter(search, max_concurrent=concurrent), scheduler, fixed


def build(
    name: str,
    table: tabular.RecordedTable,
    seed: int,
    trials: int,
    study: str,
    db: str,
    concurrent: int = 2,
    form: str = "variant",
    startup: int | None = None,
) -> tuple[Any, TrialScheduler, dict[str, Any]]:
    """The search algorithm, the scheduler and the config constants of one strategy, on
    the problem in ``form``; ``startup``: the ours-* strategies with this many
    space-filling starts, not the driver's."""
    epochs, cycle = table.max_epoch, int(table.manifest.get("cycle_epochs", 1))
    train_seed = table.seeds[seed % len(table.seeds)]
    fixed = {"epochs": epochs, "seed": train_seed, "device": "cpu", "threads": 1}
    free = space(table, form=form)
    asha = make_scheduler("asha", epochs, cycle)
    if name in OURS:
        model = "gp" if name.startswith("ours-gp") else "tpe"  # the driver's --sampler
        sampler, _ = make_sampler(free, seed, False, trials, model)
        if startup is not None:  # --startup: another number of space-filling starts
            sampler = SpaceFillingSampler(min(trials, startup), seed, model)
        skip = name != "ours-repeats"
        scheduler = make_scheduler(scheduler_of(name, epochs), epochs, cycle)
        return _searcher(free, fixed, sampler, study, db, concurrent, skip), scheduler, fixed
    if name == "random-asha":
        sampler = optuna.samplers.RandomSampler(seed=seed)
        return _searcher(free, fixed, sampler, study, db, concurrent), asha, fixed
    if name == "tpe-fifo":
        sampler = optuna.samplers.TPESampler(seed=seed)
        return _searcher(free, fixed, sampler, study, db, concurrent), FIFOScheduler(), fixed
    if name == "grid":
        grid = space(table, grid=True, form=form)
        sampler, _ = make_sampler(grid, seed, False, trials)
        return _searcher(grid, fixed, sampler, study, db, concurrent), FIFOScheduler(), fixed
    if name == "hyperband":
        sampler = optuna.samplers.RandomSampler(seed=seed)
        hyperband = HyperBandScheduler(time_attr="epoch", max_t=epochs, reduction_factor=2)
        return _searcher(free, fixed, sampler, study, db, concurrent), hyperband, fixed
    if name == "bohb":
        return _bohb(table, fixed, seed, epochs, concurrent, form)
    if name in ("optuna-median", "optuna-hyperband"):
        sampler = optuna.samplers.TPESampler(seed=seed)
        pruning = OptunaPruning(optuna_pruner(name, epochs))
        return _searcher(free, fixed, sampler, study, db, concurrent), pruning, fixed
    if name in ("ours-both", "ours-both-fifo"):
        sampler, _ = make_sampler(free, seed, True, trials)
        kind = scheduler_of(name, epochs)
        scheduler = make_scheduler(kind, epochs, cycle, BOTH_METRICS, BOTH_MODES)
        search = _searcher(free, fixed, sampler, study, db, concurrent, True, both=True)
        return search, scheduler, fixed
    if name == "motpe-fifo":
        sampler = optuna.samplers.TPESampler(seed=seed)
        search = _searcher(free, fixed, sampler, study, db, concurrent, both=True)
        return search, FIFOScheduler(), fixed
    raise ValueError(f"--strategies: unknown strategy {name!r}; expected one of {STRATEGIES}")
