"""Search strategies compared on a recorded problem, over many search seeds.

    python bench/bench_strategies.py --table bench/recorded/paper_margin \\
        --search-seeds 20 [--strategies ours,random-asha,tpe-fifo,grid,hyperband,bohb] \\
        [--budget 0.5] [--time-scale 0.005] [--plot FILE]

Every search is real Ray Tune (one local Ray for all of them, 2 trials at a time with 1
CPU each, as the driver runs them on this machine) with the real searchers and
schedulers, on :func:`tabular.replay_trainable`: the recorded epochs of each
(variant, margin) at the training seed ``search seed mod`` the table's seeds. A
search's cost is counted in trial-epochs exactly as a live one's: every epoch report
of epoch >= 1, in the order Tune processed them, up to ``--budget`` x the grid's
trial-epochs. Strategies:

- ``ours``: the driver's defaults (``gridsearch.make_sampler``: space-filling
  starts then TPE, repeated draws skipped; ``--scheduler auto``, resolved by
  ``gridsearch._scheduler_choice.resolve_scheduler`` for the table's epochs);
- ``ours-asha`` / ``ours-fifo``: the same with ASHA at the ends of learning-rate cycles /
  without early stopping, whichever ``auto`` did not pick (run by default);
- ``ours-repeats``: ours without skipping repeated draws (Ray's OptunaSearch trains
  every draw), to measure what skipping them saves;
- ``ours-warm``: ours started (``--warm-start``) from the trials of the ``ours`` search
  with the next search seed, which replayed the other training seed: an earlier search
  of a related problem, its cost not counted (it was paid before);
- ``ours-warm-table``: ours started from the ``ours`` search (same search seed) of
  another recorded table of the same space, ``--warm-table`` (a smaller world: the case
  ``--warm-start`` is for), its cost not counted;
- ``ours-gp``: ours with ``--sampler gp`` (Optuna's GP sampler after the space-filling
  starts, not TPE); ``ours-gp-asha``: the same with ASHA;
- ``ours-k2``: ours with ``--seeds-per-config 2``: each trial the mean of two training
  seeds (the table's next one too), each of its epochs costing 2 trial-epochs;
- ``random-asha``: Optuna's random sampler, the same ASHA;
- ``tpe-fifo``: Optuna's TPE (its own random start-up), every trial to the end;
- ``grid``: Optuna's grid sampler (its seeded random order), every trial to the end;
- ``hyperband``: Ray Tune's HyperBandScheduler (max_t = epochs, eta 2) with random draws;
- ``bohb``: Ray Tune's TuneBOHB with HyperBandForBOHB (needs hpbandster and ConfigSpace:
  ``pip install -e ".[bench]"``);
- ``optuna-median`` / ``optuna-hyperband``: Optuna's own pruner-based alternative, a
  study as Optuna makes it by default (TPE; ``MedianPruner``) and with its
  ``HyperbandPruner`` (min 1 epoch, max the table's, Optuna's reduction factor 3). Ray's
  OptunaSearch reports every epoch to its study but creates it with ``NopPruner`` and
  never asks ``should_prune``, so a pruner does not run under Tune as it comes;
  :class:`OptunaPruning` is the bridge.

For each strategy the curve "best dev R@10 mean found against trial-epochs spent" (as a
share of the training seed's grid best), median and interquartile range over the
search seeds, and the trial-epochs to within 1% of the grid's best. And, since a
search that selects on one seed also selects that seed's luck, the **held-out** curve:
the configuration the search would pick at each point (its best objective so far),
valued by its snapshot ensemble's test R@10 mean averaged over the training seeds the
search never saw, as a share of the best configuration's there.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

import optuna
import ray
import tabular  # puts the repository on sys.path (through _common)
from _common import BadInput, run
from bench_search_efficiency import hypervolume
from ray import cloudpickle, tune
from ray.tune.schedulers import FIFOScheduler, HyperBandScheduler, TrialScheduler

from gridsearch import (
    SpaceFillingSampler,
    make_sampler,
    make_scheduler,
    quiet,
    resolve_scheduler,
    searcher,
    warm_start,
)
from gridsearch.spaces import SearchSpace
from trainables import names

# The replay trainable travels to Ray's workers by value: they need not find bench/ on
# their path (a test imports it from elsewhere).
cloudpickle.register_pickle_by_value(tabular)
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Parts.decode, for BOHB

WITHIN = 0.99
STRATEGIES = (
    "ours", "ours-asha", "ours-fifo", "ours-repeats", "ours-warm", "ours-warm-table",
    "ours-k2", "ours-gp", "ours-gp-asha", "random-asha", "tpe-fifo", "grid", "hyperband", "bohb",
    "optuna-median", "optuna-hyperband",
)  # fmt: skip
OURS = ("ours", "ours-asha", "ours-fifo", "ours-repeats", "ours-warm", "ours-warm-table",
        "ours-k2", "ours-gp", "ours-gp-asha")  # fmt: skip
SEEDS_PER_CONFIG = {"ours-k2": 2}
STARTUP_OVERRIDE: list[int] = []  # --startup N: ours with N space-filling starts
BOTH = ("ours-both", "ours-both-fifo", "motpe-fifo")  # --objective both
BOTH_METRICS, BOTH_MODES = [names.BEST_RETRIEVAL, names.BEST_SEMANTIC], ["max", "max"]
SHARES = (0.05, 0.10, 0.15, 0.20, 0.30, 0.40, 0.50)  # budgets, as shares of the grid


class _Suggest:
    """The define-by-run space of the recorded problem in its ``variant`` form: variant
    and margin, both categorical, decoded as ``bench_search_efficiency.VariantMargin``
    does (Optuna puts the variant's name beside the decoded keys, where the replay looks
    it up)."""

    def __init__(self, variants: dict[str, dict[str, Any]], margins: Sequence[float]) -> None:
        self.variants, self.margins = dict(variants), tuple(margins)

    def __call__(self, trial: Any) -> dict[str, Any]:
        variant = trial.suggest_categorical("variant", tuple(self.variants))
        margin = trial.suggest_categorical("margin", self.margins)
        return {**self.variants[variant], "margin": margin}


MODEL_KEYS = ("hidden_size", "rnn_type", "pooling")  # a recorded variant's model: one choice
LOG_KEYS = ("lr_max", "lr_min")  # searched on a log axis by the driver's spaces


class Parts:
    """The recorded problem in its ``parts`` form: each parameter searched the way the
    driver's spaces search it, not the table's variants as one categorical.

    - ``model``: the variant's model (the name before any "/": "gru-32-max"), a choice,
      as ``paper_grid`` draws it;
    - ``lr_max``/``lr_min`` with 3+ recorded values: log-uniform floats, as
      ``gridsearch.spaces`` draws them, each value standing for the recorded one nearest
      on the log axis (the range reaches half a step past the end values, so every
      recorded value owns an equal share of it);
    - ``margin`` with 3+ evenly spaced values: a float on their step (the margin sweep's
      range, rounded as a space file's ``step`` rounds it);
    - anything else (``batch_size``, a 2-valued ``lr_min``): a choice, as in ``full``.

    So a sampler that models order (TPE on numbers) can use it; every draw decodes to a
    recorded (variant, margin)."""

    def __init__(self, table: tabular.RecordedTable) -> None:
        self.variants = {v: dict(table.manifest["variants"][v]) for v in table.variants}
        self.models = tuple(dict.fromkeys(v.split("/")[0] for v in self.variants))
        extra = [k for k in dict.fromkeys(k for c in self.variants.values() for k in c)
                 if k not in MODEL_KEYS]  # fmt: skip
        self.values = {k: sorted({c[k] for c in self.variants.values()}) for k in extra}
        self.margins = tuple(sorted(table.margins))
        self.lookup = {
            (name.split("/")[0], *(config[k] for k in extra)): name
            for name, config in self.variants.items()
        }
        if len(self.lookup) != len(self.variants) or len(self.lookup) != len(self.models) * (
            math.prod(len(v) for v in self.values.values())
        ):
            raise ValueError(f"{table.manifest.get('problem')}: the variants are not every "
                             "model x parameter combination; use the variant form")  # fmt: skip
        self._distributions = self._draws()

    def distributions(self) -> dict[str, optuna.distributions.BaseDistribution]:
        """Each parameter's distribution, in drawing order."""
        return dict(self._distributions)

    def _draws(self) -> dict[str, optuna.distributions.BaseDistribution]:
        out: dict[str, optuna.distributions.BaseDistribution] = {
            "model": optuna.distributions.CategoricalDistribution(self.models)
        }
        for key, values in self.values.items():
            if key in LOG_KEYS and len(values) >= 3:
                low, high = _log_range(values)
                out[key] = optuna.distributions.FloatDistribution(low, high, log=True)
            else:
                out[key] = optuna.distributions.CategoricalDistribution(values)
        step = _step(self.margins)
        out["margin"] = (
            optuna.distributions.FloatDistribution(self.margins[0], self.margins[-1], step=step)
            if step
            else optuna.distributions.CategoricalDistribution(self.margins)
        )
        return out

    def __call__(self, trial: Any) -> dict[str, Any]:
        drawn = {}
        for key, distribution in self._distributions.items():
            if isinstance(distribution, optuna.distributions.CategoricalDistribution):
                drawn[key] = trial.suggest_categorical(key, distribution.choices)
            else:
                drawn[key] = trial.suggest_float(
                    key, distribution.low, distribution.high, log=distribution.log,
                    step=distribution.step,
                )  # fmt: skip
        variant, margin = self.decode(drawn)
        # Optuna puts the drawn values beside these (the replay decodes "model" and them)
        return {**self.variants[variant], "margin": margin}

    def decode(self, params: dict[str, Any]) -> tuple[str, float]:
        """The recorded (variant, margin) a draw stands for."""
        key = [params["model"]]
        for name, values in self.values.items():
            value = params[name]
            if isinstance(self._distributions[name], optuna.distributions.FloatDistribution):
                value = min(values, key=lambda v: abs(math.log(v) - math.log(params[name])))
            key.append(value)
        margin = min(self.margins, key=lambda m: abs(m - float(params["margin"])))
        return self.lookup[tuple(key)], margin

    def params_of(self, variant: str, margin: float) -> dict[str, Any]:
        """The draw that stands for a recorded (variant, margin): its own values."""
        config = self.variants[variant]
        return {"model": variant.split("/")[0], **{k: config[k] for k in self.values},
                "margin": margin}  # fmt: skip

    def grid(self) -> dict[str, Sequence[Any]]:
        return {"model": self.models, **self.values, "margin": self.margins}


def _log_range(values: Sequence[float]) -> tuple[float, float]:
    """Half a (log) step past each end of geometrically spread values."""
    logs = [math.log(v) for v in values]
    below, above = (logs[1] - logs[0]) / 2, (logs[-1] - logs[-2]) / 2
    return math.exp(logs[0] - below), math.exp(logs[-1] + above)


def _step(values: Sequence[float]) -> float | None:
    """The common step of 3+ evenly spaced values, else None."""
    if len(values) < 3:
        return None
    gaps = [b - a for a, b in itertools.pairwise(values)]
    return round(gaps[0], 9) if max(gaps) - min(gaps) < 1e-9 else None


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


@dataclass
class Events:
    """What a search did: every epoch report in the order Tune processed them."""

    # (trial id, epoch, dev/r10_mean_best, dev/semantic_best)
    reports: list[tuple[str, int, float, float]]
    configs: dict[str, tuple[str, float]]  # trial id -> (variant, margin)
    cost: int = 1  # trial-epochs one report stands for (the seeds per config)

    def decisions(self) -> list[tuple[str, float, int]]:
        """(variant, margin, last epoch reported) of every trial, sorted."""
        last: dict[str, int] = {}
        for trial, epoch, *_ in self.reports:
            last[trial] = max(epoch, last.get(trial, 0))
        return sorted((*self.configs[t], e) for t, e in last.items())

    def curve(self) -> list[float]:
        """Best dev R@10 mean found after each trained trial-epoch (index 0 = 1 epoch)."""
        best, out = -math.inf, []
        for _, epoch, value, _ in self.reports:
            if epoch < 1:
                continue
            best = max(best, value)
            out += [best] * self.cost
        return out

    def incumbents(self) -> list[tuple[str, float]]:
        """The config the search would pick (the best dev R@10 mean so far) after each
        trained trial-epoch."""
        best, pick, out = -math.inf, ("", 0.0), []
        for trial, epoch, value, _ in self.reports:
            if value > best:
                best, pick = value, self.configs[trial]
            if epoch >= 1:
                out += [pick] * self.cost
        return out

    def hypervolumes(self, ref: tuple[float, float]) -> list[float]:
        """The hypervolume above ``ref`` of every trial's latest (dev R@10 mean best, dev
        semantic best) after each trained trial-epoch."""
        latest: dict[str, tuple[float, float]] = {}
        out = []
        for trial, epoch, retrieval, semantic in self.reports:
            latest[trial] = (retrieval, _finite(semantic))
            if epoch >= 1:
                out += [hypervolume(list(latest.values()), ref)] * self.cost
        return out


def _finite(value: float) -> float:
    return -math.inf if math.isnan(value) else value


class _Recorder(tune.Callback):
    def __init__(self, decode: Any = None) -> None:
        self.reports: list[tuple[str, int, float, float]] = []
        self.configs: dict[str, tuple[str, float]] = {}
        self.decode = decode or tabular.variant_margin

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info):
        self.configs[trial.trial_id] = self.decode(trial.config)
        best = (result[names.BEST_RETRIEVAL], result.get(names.BEST_SEMANTIC, math.nan))
        self.reports.append((trial.trial_id, int(result["epoch"]), *best))


class OptunaPruning(FIFOScheduler):
    """An Optuna pruner judging Tune's trials, as it judges them in ``study.optimize``: a
    study of its own with ``pruner``, one Optuna trial per Tune trial (``ask``), each
    trained epoch reported to it (``Trial.report(value, epoch)``; epoch 0, the untrained
    model, is not), and the Tune trial stopped when ``should_prune()`` says so (told
    PRUNED; a trial that ends is told its last value). The searcher learns of a pruned
    trial as of one ASHA stopped: its last reported value."""

    def __init__(self, pruner: optuna.pruners.BasePruner, metric: str = names.BEST_RETRIEVAL):
        super().__init__()
        self.objective = metric
        self.study = optuna.create_study(direction="maximize", pruner=pruner)
        self.trials: dict[str, optuna.Trial] = {}
        self.pruned: dict[str, int] = {}  # Tune trial id -> the epoch it was pruned at

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        return True  # its metric is its own

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        self.trials[trial.trial_id] = self.study.ask()

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        epoch = int(result["epoch"])
        ask = self.trials.get(trial.trial_id)
        if epoch < 1 or ask is None:
            return TrialScheduler.CONTINUE
        ask.report(float(result[self.objective]), epoch)
        if not ask.should_prune():
            return TrialScheduler.CONTINUE
        self.study.tell(ask, state=optuna.trial.TrialState.PRUNED)
        del self.trials[trial.trial_id]
        self.pruned[trial.trial_id] = epoch
        return TrialScheduler.STOP

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> None:
        ask = self.trials.pop(trial.trial_id, None)
        if ask is not None:
            self.study.tell(ask, float(result[self.objective]))

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        self.on_trial_remove(tune_controller, trial)

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        ask = self.trials.pop(trial.trial_id, None)
        if ask is not None:
            self.study.tell(ask, state=optuna.trial.TrialState.FAIL)


def optuna_pruner(name: str, epochs: int) -> optuna.pruners.BasePruner:
    """The pruner of strategy ``optuna-median`` (Optuna's default study's) or
    ``optuna-hyperband`` (resources in epochs, Optuna's default reduction factor)."""
    if name == "optuna-median":
        return optuna.pruners.MedianPruner()
    return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=epochs)


FORMS = ("variant", "parts")


def _space(table: tabular.RecordedTable, grid: bool = False, form: str = "variant") -> SearchSpace:
    """The recorded problem's space in ``form`` (see :class:`Parts`); with ``grid``, its
    grid (which selects Optuna's grid sampler), else none (the other samplers)."""
    if form == "parts":
        parts = Parts(table)
        return SearchSpace("recorded", "a recorded problem, by parameter", parts,
                           grid=parts.grid() if grid else None)  # fmt: skip
    return SearchSpace(
        "recorded",
        "a recorded problem",
        _Suggest({v: table.manifest["variants"][v] for v in table.variants}, table.margins),
        grid={"variant": table.variants, "margin": table.margins} if grid else None,
    )


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
    """The driver's searcher; the stock strategies train every draw, as Ray's
    OptunaSearch does (``skip_repeats`` False). ``both``: the two objectives."""
    return searcher(
        space,
        fixed,
        sampler,
        metric=BOTH_METRICS if both else names.BEST_RETRIEVAL,
        mode=BOTH_MODES if both else "max",
        study=study,
        storage_url=db,
        max_concurrent=concurrent,
        skip_repeats=skip_repeats,
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
            elif d.step:  # hpbandster takes no ordinals: a float whose draws Parts.decode
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
) -> tuple[Any, TrialScheduler, dict[str, Any]]:
    """The search algorithm, the scheduler and the config constants of one strategy, on
    the problem in ``form``."""
    epochs, cycle = table.max_epoch, int(table.manifest.get("cycle_epochs", 1))
    train_seed = table.seeds[seed % len(table.seeds)]
    fixed = {"epochs": epochs, "seed": train_seed, "device": "cpu", "threads": 1}
    free = _space(table, form=form)
    asha = make_scheduler("asha", epochs, cycle)
    if name in OURS:
        model = "gp" if name.startswith("ours-gp") else "tpe"  # the driver's --sampler
        sampler, _ = make_sampler(free, seed, False, trials, model)
        if STARTUP_OVERRIDE:  # --startup: another number of space-filling starts
            sampler = SpaceFillingSampler(min(trials, STARTUP_OVERRIDE[0]), seed, model)
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
        grid = _space(table, grid=True, form=form)
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


def run_one(
    name: str,
    table: tabular.RecordedTable,
    seed: int,
    budget: int,
    time_scale: float,
    scratch: Path,
    *,
    trials: int | None = None,
    concurrent: int = 2,
    warm_from: Events | None = None,
    form: str = "variant",
) -> Events:
    """One whole search of strategy ``name`` with search seed ``seed``: ``trials`` of
    them (default: as many as the budget can pay for, whole ones or one epoch each),
    ``concurrent`` at a time."""
    cost = SEEDS_PER_CONFIG.get(name, 1)
    if trials is None:
        fifo = scheduler_of(name, table.max_epoch) == "fifo" and name not in ("hyperband", "bohb")
        trials = math.ceil(budget / (cost * table.max_epoch)) if fifo else budget
    label = f"{name}-{seed}"
    scratch.mkdir(parents=True, exist_ok=True)
    db = f"sqlite:///{scratch / label}.db"
    if warm_from is not None:
        _warm_start(table, warm_from, label, db, form)
    search, scheduler, fixed = build(name, table, seed, trials, label, db, concurrent, form)
    decode = decoder(table, form)
    recorder = _Recorder(decode)
    param_space = fixed if name == "bohb" else None
    stopper = _Budget(budget, recorder, cost)
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
            metric=names.BEST_RETRIEVAL,
            mode="max",
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


def decoder(table: tabular.RecordedTable, form: str) -> Any:
    """A trial's config -> its recorded (variant, margin), in ``form`` (None: the
    config names them)."""
    return Parts(table).decode if form == "parts" else None


def _warm_start(
    table: tabular.RecordedTable, earlier: Events, study: str, db: str, form: str = "variant"
) -> None:
    """The study ``study`` started, through ``gridsearch.warm_start``, from the
    trials of an earlier search (each trial's last dev R@10 mean best)."""
    parts = Parts(table) if form == "parts" else None
    choices = parts.distributions() if parts else {
        "variant": optuna.distributions.CategoricalDistribution(table.variants),
        "margin": optuna.distributions.CategoricalDistribution(table.margins),
    }  # fmt: skip
    source = optuna.create_study(study_name=f"{study}-earlier", storage=db, direction="maximize")
    last: dict[str, float] = {}
    for trial, _, retrieval, _ in earlier.reports:
        last[trial] = retrieval
    for trial, value in last.items():
        variant, margin = earlier.configs[trial]
        params = parts.params_of(variant, margin) if parts else {"variant": variant,
                                                                 "margin": margin}  # fmt: skip
        source.add_trial(
            optuna.trial.create_trial(params=params, distributions=choices, value=value)
        )
    fixed = {"epochs": table.max_epoch, "seed": 0, "device": "cpu", "threads": 1}
    warm_start(
        f"{study}-earlier", db, study=study, storage_url=db, modes=["max"],
        space=_space(table, form=form), fixed=fixed,
    )  # fmt: skip


class _Budget(tune.Stopper):
    """Stops the whole search once the trial-epochs spent reach the budget."""

    def __init__(self, budget: int, recorder: _Recorder, cost: int = 1) -> None:
        self.budget, self.recorder, self.cost = budget, recorder, cost

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        return self.cost * sum(r[1] >= 1 for r in self.recorder.reports) >= self.budget


class SavedSearches:
    """Finished searches kept in a JSON-lines file (``--results``), so that a long
    comparison survives a crash or a new strategy and its tables can be printed again.
    A line holds the search's settings (``key``: what changes its events), the strategy,
    the search seed and its :class:`Events`; only lines with this run's key are read.
    ``path`` None: nothing is kept."""

    def __init__(self, path: Path | None, key: dict[str, Any]) -> None:
        self.path, self.key = path, json.loads(json.dumps(key))
        self.found: dict[tuple[str, int], Events] = {}
        if path is None or not path.exists():
            return
        for number, line in enumerate(path.read_text().splitlines(), 1):
            try:
                row = json.loads(line)
                reports = [(str(t), int(e), float(r), float(m)) for t, e, r, m in row["reports"]]
                configs = {t: (str(v), float(mg)) for t, (v, mg) in row["configs"].items()}
                events = Events(reports, configs, int(row["cost"]))
                found = (str(row["strategy"]), int(row["seed"]))
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise BadInput(f"error: --results {path}: line {number} is not a saved "
                               f"search ({e})") from None  # fmt: skip
            if row.get("key") == self.key:
                self.found[found] = events

    def get(self, strategy: str, seed: int) -> Events | None:
        return self.found.get((strategy, seed))

    def add(self, strategy: str, seed: int, events: Events) -> None:
        if self.path is None:
            return
        row = {"key": self.key, "strategy": strategy, "seed": seed, "cost": events.cost,
               "reports": events.reports, "configs": events.configs}  # fmt: skip
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[1], q[2]


def grid_front(table: tabular.RecordedTable, seed: int) -> tuple[tuple[float, float], float]:
    """The reference point (the grid's worst final values) and the grid's hypervolume,
    over every config's final (dev R@10 mean best, dev semantic best) at ``seed``."""
    points = [
        (c.epochs[-1][names.BEST_RETRIEVAL], _finite(c.epochs[-1][names.BEST_SEMANTIC]))
        for (_, _, s), c in table.curves.items()
        if s == seed
    ]
    ref = (min(p[0] for p in points) - 1e-9, min(p[1] for p in points) - 1e-9)
    return ref, hypervolume(points, ref)


def percent_curves(
    table: tabular.RecordedTable, runs: list[tuple[int, Events]], both: bool, k: int = 1
) -> list[list[float]]:
    """Per search seed, after each trained trial-epoch: the best dev R@10 mean found as a
    % of the grid's best (``both``: the hypervolume as a % of the grid's), at the
    training seed the search replayed (with ``k`` seeds per config: the grid's best mean
    over the ``k`` seeds it replayed)."""
    out = []
    for seed, events in runs:
        train_seed = table.seeds[seed % len(table.seeds)]
        if both:
            ref, whole = grid_front(table, train_seed)
            out.append([100 * h / whole for h in events.hypervolumes(ref)])
        else:
            seen = table.seed_run(train_seed, k)
            best = max(
                statistics.fmean(
                    table.curve(*cfg, s).epochs[-1][names.BEST_RETRIEVAL] for s in seen
                )
                for cfg in table.configs()
            )
            out.append([100 * v / best for v in events.curve()])
    return out


def heldout_curves(
    table: tabular.RecordedTable, runs: list[tuple[int, Events]], seeds_per_config: int
) -> list[list[float]]:
    """Per search seed, after each trained trial-epoch: the config it would pick, valued
    by its ensemble's test R@10 mean (``names.FINISHED``, the last epoch) averaged over
    the training seeds the search never saw, as a % of the best config's value there.
    Empty when the search saw every recorded seed."""
    out = []
    for seed, events in runs:
        first = table.seeds[seed % len(table.seeds)]
        unseen = [s for s in table.seeds if s not in table.seed_run(first, seeds_per_config)]
        if not unseen:
            return []
        value = {
            cfg: statistics.fmean(table.curve(*cfg, s).epochs[-1][names.FINISHED] for s in unseen)
            for cfg in table.configs()
        }
        best = max(value.values())
        out.append([100 * value[pick] / best for pick in events.incumbents()])
    return out


def _at(curve: list[float], spent: int) -> float:
    return curve[min(spent, len(curve)) - 1] if curve else 0.0


def report(curves: dict[str, list[list[float]]], grid: int, budget: int, what: str) -> None:
    marks = [s for s in SHARES if s * grid <= budget + 1e-9]
    print(f"\n{what}, median [IQR] over search seeds, after a share of the grid's {grid} "
          "trial-epochs:\n")  # fmt: skip
    print("| strategy | seeds | " + " | ".join(f"{s:.0%}" for s in marks)
          + " | trial-epochs to >= 99%: median [IQR] (% of grid) | reached |")  # fmt: skip
    print("| --- | --- | " + " | ".join("---" for _ in marks) + " | --- | --- |")
    for name, rows in curves.items():
        cells = []
        for share in marks:
            lo, mid, hi = _quartiles([_at(c, int(share * grid)) for c in rows])
            cells.append(f"{mid:.1f} [{lo:.1f}, {hi:.1f}]")
        needed = []
        for curve in rows:
            spent = next((k for k, v in enumerate(curve, 1) if v >= 100 * WITHIN), None)
            needed.append(math.inf if spent is None else spent)
        reached = sum(math.isfinite(n) for n in needed)
        lo, mid, hi = _quartiles(needed)

        def fmt(v: float) -> str:
            return ">budget" if math.isinf(v) else f"{v:.0f}"

        share = "-" if math.isinf(mid) else f"{mid / grid:.1%}"
        print(
            f"| {name} | {len(rows)} | " + " | ".join(cells)
            + f" | {fmt(mid)} [{fmt(lo)}, {fmt(hi)}] ({share}) | {reached}/{len(rows)} |"
        )  # fmt: skip


def plot(
    curves: dict[str, list[list[float]]], grid: int, budget: int, what: str, title: str,
    path: Path,
) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    xs = list(range(1, budget + 1))
    share = [100 * x / grid for x in xs]
    low = 100.0
    for name, rows in curves.items():
        q = [_quartiles([_at(c, x) for c in rows]) for x in xs]
        (line,) = ax.plot(share, [m for _, m, _ in q], label=name)
        ax.fill_between(share, [lo for lo, _, _ in q], [hi for _, _, hi in q], alpha=0.15,
                        color=line.get_color())  # fmt: skip
        low = min(low, q[len(q) // 10][1])
    ax.axhline(100 * WITHIN, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("trial-epochs spent, % of the full grid's")
    ax.set_ylabel(f"{what}, % of the grid's")
    ax.set_ylim(max(0.0, low - 5), 100.5)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(f"{title}: median and interquartile range over search seeds", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", type=Path, required=True, help="a folder `tabular.py record` wrote")
    p.add_argument("--strategies", default=None, help="comma-separated (default: all)")
    p.add_argument("--objective", choices=("retrieval", "both"), default="retrieval")
    p.add_argument("--search-seeds", type=int, default=20)
    p.add_argument("--budget", type=float, default=0.5, help="share of the grid's trial-epochs")
    p.add_argument("--time-scale", type=float, default=0.005,
                   help="replayed seconds per recorded second")  # fmt: skip
    p.add_argument("--plot", type=Path, default=None, help="write the curves here (PNG)")
    p.add_argument("--warm-table", type=Path, default=None,
                   help="ours-warm-table: the table of a related problem (same space) whose "
                   "ours search starts each search")  # fmt: skip
    p.add_argument("--form", choices=FORMS, default="variant",
                   help="how the searches see the problem: variant (the table's variants as "
                   "one choice, and the margins as another) or parts (each parameter as the "
                   "driver's spaces search it, see Parts) (default: variant)")  # fmt: skip
    p.add_argument("--startup", type=int, default=None,
                   help="ours-*: this many space-filling starts, not the driver's")  # fmt: skip
    p.add_argument("--results", type=Path, default=None,
                   help="a JSON-lines file: every finished search is appended to it, and a "
                   "search it already holds (same table, form, budget, objective, time "
                   "scale, starts) is read from it instead of run again")  # fmt: skip
    args = p.parse_args(argv)
    if args.startup is not None:
        if args.startup < 1:
            p.error(f"--startup: got {args.startup}, expected at least 1")
        STARTUP_OVERRIDE[:] = [args.startup]
    table = tabular.RecordedTable.read(args.table)
    if args.form == "parts":
        try:
            Parts(table)
        except ValueError as e:
            p.error(f"--form parts: {e}")
    warm_table = tabular.RecordedTable.read(args.warm_table) if args.warm_table else None
    budget = max(1, int(args.budget * table.grid_cost()))
    both = args.objective == "both"
    known = BOTH if both else STRATEGIES
    strategies = (
        args.strategies.split(",")
        if args.strategies
        else default_strategies(both, table.max_epoch, warm_table is not None)
    )
    for name in strategies:
        if name not in known:
            p.error(f"--strategies: unknown {name!r} for --objective {args.objective}; "
                    f"expected some of {', '.join(known)}")  # fmt: skip
        if name == "ours-warm-table" and warm_table is None:
            p.error("--strategies: ours-warm-table needs --warm-table")
        if SEEDS_PER_CONFIG.get(name, 1) > len(table.seeds):
            p.error(f"--strategies: {name} needs {SEEDS_PER_CONFIG[name]} recorded seeds, "
                    f"the table has {len(table.seeds)}")  # fmt: skip
    logging.getLogger("ray").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    quiet()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR")  # fmt: skip
    results: dict[str, list[tuple[int, Events]]] = {}
    kept = SavedSearches(args.results, {
        "table_sha256": table.manifest.get("table_sha256"), "form": args.form,
        "budget": budget, "objective": args.objective, "time_scale": args.time_scale,
        "startup": args.startup, "warm_table": str(args.warm_table or ""),
    })  # fmt: skip
    failed: list[str] = []
    if kept.found:
        print(f"{len(kept.found)} searches of these settings in {args.results}: read, not run")
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="strategies-") as scratch:
            for name in strategies:
                for seed in range(args.search_seeds):
                    t0 = time.perf_counter()
                    if (events := kept.get(name, seed)) is not None:
                        results.setdefault(name, []).append((seed, events))
                        continue
                    warm = None
                    if name == "ours-warm":  # the ours search that replayed the other seed
                        earlier = dict(results.get("ours", []))
                        warm = earlier.get((seed + 1) % args.search_seeds)
                        if warm is None or args.search_seeds < 2:
                            p.error("ours-warm needs ours run first, with >= 2 search seeds")
                    if name == "ours-warm-table":  # ours on the related table, same seed
                        assert warm_table is not None
                        warm = run_one(
                            "ours", warm_table, seed,
                            max(1, int(args.budget * warm_table.grid_cost())),
                            args.time_scale, Path(scratch) / "warm-table", form=args.form,
                        )  # fmt: skip
                    try:
                        events = run_one(
                            name.removesuffix("-table"), table, seed, budget, args.time_scale,
                            Path(scratch), warm_from=warm, form=args.form,
                        )  # fmt: skip
                    except Exception as e:  # one strategy's failure: the others still run
                        print(f"error: {name} seed {seed}: {type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}",
                              file=sys.stderr, flush=True)  # fmt: skip
                        failed.append(name)
                        results.pop(name, None)
                        break
                    kept.add(name, seed, events)
                    results.setdefault(name, []).append((seed, events))
                    curve = events.curve()
                    print(f"{name} seed {seed}: {len(curve)} trial-epochs, best "
                          f"{curve[-1] if curve else float('nan'):.2f} "
                          f"({time.perf_counter() - t0:.1f} s)", flush=True)  # fmt: skip
    finally:
        ray.shutdown()
    print(f"\n{args.search_seeds} search seeds x {len(strategies)} strategies in "
          f"{time.perf_counter() - started:.0f} s; budget {budget} trial-epochs "
          f"({args.budget:.0%} of the grid's {table.grid_cost()}); table "
          f"{args.table} ({table.manifest.get('command', '')}); form {args.form}")  # fmt: skip
    curves = {
        name: percent_curves(table, runs, both, SEEDS_PER_CONFIG.get(name, 1))
        for name, runs in results.items()
    }
    what = "Pareto hypervolume found" if both else "best dev R@10 mean found"
    report(curves, table.grid_cost(), budget, what + " (% of the grid's)")
    if not both:
        heldout = {
            name: rows
            for name, runs in results.items()
            if (rows := heldout_curves(table, runs, SEEDS_PER_CONFIG.get(name, 1)))
        }
        held = "held out: the pick's ensemble test R@10 mean at unseen training seeds"
        if heldout:  # a one-seed table (`tabular.py mean`) has no unseen seed to value at
            report(heldout, table.grid_cost(), budget, held + " (% of the best config's there)")
    if args.plot:
        title = f"{table.manifest.get('problem', 'recorded')}, objective {args.objective}"
        plot(curves, table.grid_cost(), budget, what, title, args.plot)
    if failed:
        print(f"\nfailed, left out above: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    run(main)
