"""The strategies: each one's search algorithm, scheduler and config constants, for an
objective of the driver's ``--objective`` (``gridsearch.settings.OBJECTIVES``: the metric
or metrics the searches select on, and their modes)."""

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
from gridsearch.settings import OBJECTIVES, first_objective
from gridsearch.spaces import SearchSpace

STRATEGIES = (
    "ours", "ours-asha", "ours-fifo", "ours-repeats", "ours-warm", "ours-warm-table",
    "ours-k2", "ours-gp", "ours-gp-asha", "random-asha", "tpe-fifo", "grid", "hyperband", "bohb",
    "optuna-median", "optuna-hyperband",
)  # fmt: skip
OURS = ("ours", "ours-asha", "ours-fifo", "ours-repeats", "ours-warm", "ours-warm-table",
        "ours-k2", "ours-gp", "ours-gp-asha")  # fmt: skip
SEEDS_PER_CONFIG = {"ours-k2": 2}
BOTH = ("ours-both", "ours-both-fifo", "motpe-fifo")  # --objective both


def known(objective: str) -> tuple[str, ...]:
    """The strategies of ``objective``: ``BOTH`` for "both", else ``STRATEGIES``."""
    return BOTH if objective == "both" else STRATEGIES


def scheduler_of(name: str, epochs: int, objective: str) -> str:
    """ "asha", "fifo" or "pruner" (an Optuna pruner's): the scheduler strategy ``name``
    runs with at ``epochs`` when searching for ``objective`` (ours: what the driver's
    ``--scheduler auto`` resolves to for that ``--objective``)."""
    if name in OURS or name in ("ours-both", "ours-both-fifo"):
        explicit = {"ours-asha": "asha", "ours-gp-asha": "asha", "ours-fifo": "fifo",
                    "ours-both-fifo": "fifo"}.get(name)  # fmt: skip
        return explicit or resolve_scheduler("auto", objective, epochs)
    if name.startswith("optuna-"):
        return "pruner"
    return "fifo" if name in ("tpe-fifo", "grid", "motpe-fifo") else "asha"


def default_strategies(objective: str, epochs: int, warm_table: bool) -> list[str]:
    """Every strategy of ``objective``, less the explicit ours-asha/ours-fifo that ``ours``
    already is, and ours-warm-table without ``--warm-table``."""
    if objective == "both":
        return list(BOTH)
    same = "ours-" + scheduler_of("ours", epochs, objective)
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
    objective: str,
    skip_repeats: bool = False,
) -> Any:
    """The driver's searcher (``skip_repeats``) selecting on ``objective``'s metric(s), as
    the driver's does; the stock strategies train every draw, as Ray's OptunaSearch does
    (``EveryDrawSearch``)."""
    metric, mode = OBJECTIVES[objective]
    return searcher(
        space,
        fixed,
        sampler,
        metric=metric,
        mode=mode,
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
    objective: str,
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
    metric, mode = first_objective(objective)
    search = TuneBOHB(config_space, metric=metric, mode=mode, seed=seed)
    scheduler = HyperBandForBOHB(time_attr="epoch", max_t=epochs, reduction_factor=2)
    return ConcurrencyLimiter(search, max_concurrent=concurrent), scheduler, fixed


def build(
    name: str,
    table: tabular.RecordedTable,
    seed: int,
    trials: int,
    study: str,
    db: str,
    objective: str,
    concurrent: int = 2,
    form: str = "variant",
    startup: int | None = None,
) -> tuple[Any, TrialScheduler, dict[str, Any]]:
    """The search algorithm, the scheduler and the config constants of one strategy of
    ``objective`` (see :func:`known`), on the problem in ``form``; ``startup``: the ours-*
    strategies with this many space-filling starts, not the driver's. The schedulers
    that take no metric of their own (ASHA, HyperBand) judge trials on the one Tune is
    given (``first_objective``, :func:`bench._strategies.search.run_one`)."""
    if name not in known(objective):
        raise ValueError(f"--strategies: unknown strategy {name!r} for --objective "
                         f"{objective}; expected one of {', '.join(known(objective))}")  # fmt: skip
    epochs, cycle = table.max_epoch, int(table.manifest.get("cycle_epochs", 1))
    train_seed = table.seeds[seed % len(table.seeds)]
    fixed = {"epochs": epochs, "seed": train_seed, "device": "cpu", "threads": 1}
    free = space(table, form=form)
    metric, mode = OBJECTIVES[objective]
    asha = make_scheduler("asha", epochs, cycle, metric, mode)

    def searching(searched: SearchSpace, sampler: Any, skip_repeats: bool = False) -> Any:
        return _searcher(searched, fixed, sampler, study, db, concurrent, objective, skip_repeats)

    if name in OURS or name in ("ours-both", "ours-both-fifo"):  # the driver's defaults
        model = "gp" if name.startswith("ours-gp") else "tpe"  # the driver's --sampler
        sampler, _ = make_sampler(free, seed, objective == "both", trials, model)
        if startup is not None and name in OURS:  # --startup: other space-filling starts
            sampler = SpaceFillingSampler(min(trials, startup), seed, model)
        kind = scheduler_of(name, epochs, objective)
        scheduler = make_scheduler(kind, epochs, cycle, metric, mode)
        return searching(free, sampler, name != "ours-repeats"), scheduler, fixed
    if name == "random-asha":
        return searching(free, optuna.samplers.RandomSampler(seed=seed)), asha, fixed
    if name in ("tpe-fifo", "motpe-fifo"):  # Optuna's TPE (multi-objective for "both")
        sampler = optuna.samplers.TPESampler(seed=seed)
        return searching(free, sampler), FIFOScheduler(), fixed
    if name == "grid":
        grid = space(table, grid=True, form=form)
        sampler, _ = make_sampler(grid, seed, False, trials)
        return searching(grid, sampler), FIFOScheduler(), fixed
    if name == "hyperband":
        hyperband = HyperBandScheduler(time_attr="epoch", max_t=epochs, reduction_factor=2)
        return searching(free, optuna.samplers.RandomSampler(seed=seed)), hyperband, fixed
    if name == "bohb":
        return _bohb(table, fixed, seed, epochs, concurrent, objective, form)
    assert name in ("optuna-median", "optuna-hyperband"), name
    pruning = OptunaPruning(optuna_pruner(name, epochs), *first_objective(objective))
    return searching(free, optuna.samplers.TPESampler(seed=seed)), pruning, fixed
