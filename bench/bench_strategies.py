"""Search strategies compared on a recorded problem, over many search seeds.

    python bench/bench_strategies.py --table bench/recorded/paper_margin \\
        --search-seeds 20 [--objective retrieval|semantic|both] \\
        [--strategies ours,random-asha,tpe-fifo,grid,hyperband,bohb] \\
        [--budget 0.5] [--time-scale 0.005] [--plot FILE]

``--objective`` is the driver's (``gridsearch.settings.OBJECTIVES``): the searches select
on, and are valued by, the best dev R@10 mean (``retrieval``, the default), the best dev
semantic score (``semantic``) or both at once (``both``: the Pareto front, its
hypervolume; the strategies ``ours-both``, ``ours-both-fifo`` and ``motpe-fifo``). Every
searcher, scheduler and pruner below is given the objective's metric, and Tune its first
one, as the driver gives them.

Every search is real Ray Tune (one local Ray for all of them, 2 trials at a time with 1
CPU each, as the driver runs them on this machine; ``--max-concurrent``) with the real
searchers and schedulers, on :func:`tabular.replay_trainable`: the recorded epochs of each
(variant, margin) at the training seed ``search seed mod`` the table's seeds. A
search's cost is counted in trial-epochs exactly as a live one's: every epoch report
of epoch >= 1, in the order Tune processed them, up to ``--budget`` x the grid's
trial-epochs. Strategies:

- ``ours``: the driver's defaults (``gridsearch.make_sampler``: space-filling
  starts then TPE, repeated draws skipped; ``--scheduler auto``, resolved by
  ``gridsearch.resolve_scheduler`` for the objective and the table's epochs);
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

For each strategy the curve "best dev R@10 mean (``semantic``: dev semantic score) found
against trial-epochs spent" (as a share of the training seed's grid best; ``both``: the
hypervolume of the front found, as a share of the grid's), median and interquartile
range over the search seeds, and the trial-epochs to within 1% of the grid's best. And,
for one objective, since a search that selects on one seed also selects that seed's
luck, the **held-out** curve: the configuration the search would pick at each point
(its best objective so far), valued by its snapshot ensemble's test R@10 mean
(``semantic``: its test semantic score) averaged over the training seeds the search
never saw, as a share of the best configuration's there.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

if not __package__:  # run as a file: the repository first on sys.path (see bench/__init__.py)
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench import _strategies as s
from bench import tabular
from bench._cli import BadInput, entry, parser
from bench._strategies.events import Events, SavedSearches
from gridsearch.settings import OBJECTIVES, first_objective
from trainables import names

Results = dict[str, list[tuple[int, Events]]]
# What each --objective's searches are valued by, as the tables and the plot name it: on
# dev data at the seed searched, and (one objective) on test data at the unseen seeds.
FOUND = {
    "retrieval": "best dev R@10 mean found",
    "semantic": "best dev semantic score found",
    "both": "Pareto hypervolume found",
}
HELD_OUT = {
    "retrieval": "the pick's ensemble test R@10 mean",
    "semantic": "the pick's ensemble test semantic score",
}
SHOWN = {names.BEST_RETRIEVAL: ".2f", names.BEST_SEMANTIC: ".3f"}  # a search's best, printed


def _parser() -> argparse.ArgumentParser:
    p = parser(__doc__)
    p.add_argument("--table", type=Path, required=True, help="a folder `tabular.py record` wrote")
    p.add_argument("--strategies", default=None, help="comma-separated (default: all)")
    p.add_argument("--objective", choices=tuple(OBJECTIVES), default="retrieval",
                   help="what the searches select on and are valued by, as the driver's "
                   "--objective: retrieval (best dev R@10 mean), semantic (best dev "
                   "semantic score) or both (their Pareto front's hypervolume)")  # fmt: skip
    p.add_argument("--search-seeds", type=int, default=20, help="searches per strategy")
    p.add_argument("--budget", type=float, default=0.5, help="share of the grid's trial-epochs")
    p.add_argument("--time-scale", type=float, default=0.005,
                   help="replayed seconds per recorded second")  # fmt: skip
    p.add_argument("--plot", type=Path, default=None, help="write the curves here (PNG)")
    p.add_argument("--warm-table", type=Path, default=None,
                   help="ours-warm-table: the table of a related problem (same space) whose "
                   "ours search starts each search")  # fmt: skip
    p.add_argument("--form", choices=s.FORMS, default="variant",
                   help="how the searches see the problem: variant (the table's variants as "
                   "one choice, and the margins as another) or parts (each parameter as the "
                   "driver's spaces search it, see Parts)")  # fmt: skip
    p.add_argument("--startup", type=int, default=None,
                   help="ours-*: this many space-filling starts, not the driver's")  # fmt: skip
    p.add_argument("--address", default=None,
                   help="join this Ray cluster (default: start a local one, 2 CPUs)")  # fmt: skip
    p.add_argument("--max-concurrent", type=int, default=2,
                   help="trials at a time in each search (1: each search's trials share one "
                   "trial process)")  # fmt: skip
    p.add_argument("--results", type=Path, default=None,
                   help="a JSON-lines file: every finished search is appended to it, and a "
                   "search it already holds (same table, form, budget, objective, time "
                   "scale, starts) is read from it instead of run again")  # fmt: skip
    return p


@dataclass(frozen=True)
class Comparison:
    """What the command line asks for, checked."""

    table: tabular.RecordedTable
    warm_table: tabular.RecordedTable | None
    strategies: list[str]
    budget: int  # trial-epochs per search
    objective: str  # --objective: a key of gridsearch.settings.OBJECTIVES


def _comparison(p: argparse.ArgumentParser, args: argparse.Namespace) -> Comparison:
    """The arguments checked (each problem one error line, through ``p``)."""
    if args.startup is not None and args.startup < 1:
        p.error(f"--startup: got {args.startup}, expected at least 1")
    if args.max_concurrent < 1:
        p.error(f"--max-concurrent: got {args.max_concurrent}, expected at least 1")
    table = tabular.read_table(args.table)
    if args.form == "parts":
        try:
            s.Parts(table)
        except ValueError as e:
            p.error(f"--form parts: {e}")
    warm_table = tabular.read_table(args.warm_table, "--warm-table") if args.warm_table else None
    strategies = (
        args.strategies.split(",")
        if args.strategies
        else s.default_strategies(args.objective, table.max_epoch, warm_table is not None)
    )
    known = s.known(args.objective)
    for name in strategies:
        if name not in known:
            p.error(f"--strategies: unknown {name!r} for --objective {args.objective}; "
                    f"expected some of {', '.join(known)}")  # fmt: skip
        if name == "ours-warm-table" and warm_table is None:
            p.error("--strategies: ours-warm-table needs --warm-table")
        if s.SEEDS_PER_CONFIG.get(name, 1) > len(table.seeds):
            p.error(f"--strategies: {name} needs {s.SEEDS_PER_CONFIG[name]} recorded seeds, "
                    f"the table has {len(table.seeds)}")  # fmt: skip
    budget = max(1, int(args.budget * table.grid_cost()))
    return Comparison(table, warm_table, strategies, budget, args.objective)


def _start_ray(address: str | None) -> None:
    import ray

    from gridsearch import quiet

    logging.getLogger("ray").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    quiet()
    if address:
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    else:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.ERROR)  # fmt: skip


def _saved(args: argparse.Namespace, c: Comparison) -> SavedSearches:
    # the trials at a time change a search's events; in the key only when not the default
    # 2, so that the files written before --max-concurrent existed are still read
    concurrent = {} if args.max_concurrent == 2 else {"max_concurrent": args.max_concurrent}
    return SavedSearches(args.results, {
        "table_sha256": c.table.manifest.get("table_sha256"), "form": args.form,
        "budget": c.budget, "objective": args.objective, "time_scale": args.time_scale,
        "startup": args.startup, "warm_table": str(args.warm_table or ""), **concurrent,
    })  # fmt: skip


def _warm_from(
    name: str, seed: int, args: argparse.Namespace, c: Comparison, results: Results, scratch: Path
) -> Events | None:
    """The earlier search a warm strategy starts from: ours with the next search seed
    (``ours-warm``) or ours on the related table, same seed (``ours-warm-table``)."""
    if name == "ours-warm":  # the ours search that replayed the other seed
        warm = dict(results.get("ours", [])).get((seed + 1) % args.search_seeds)
        if warm is None or args.search_seeds < 2:
            raise BadInput("error: ours-warm needs ours run first, with >= 2 search seeds")
        return warm
    if name == "ours-warm-table":
        assert c.warm_table is not None
        return s.run_one(
            "ours", c.warm_table, seed, max(1, int(args.budget * c.warm_table.grid_cost())),
            args.time_scale, scratch / "warm-table", objective=c.objective,
            concurrent=args.max_concurrent, form=args.form, startup=args.startup,
        )  # fmt: skip
    return None


def _search(
    name: str, seed: int, args: argparse.Namespace, c: Comparison, results: Results, scratch: Path
) -> Events:
    """One search of strategy ``name``, printed as it ends."""
    started = time.perf_counter()
    warm = _warm_from(name, seed, args, c, results, scratch)
    events = s.run_one(
        name.removesuffix("-table"), c.table, seed, c.budget, args.time_scale, scratch,
        objective=c.objective, concurrent=args.max_concurrent, warm_from=warm, form=args.form,
        startup=args.startup,
    )  # fmt: skip
    metric, _ = first_objective(c.objective)  # for both: the best R@10 mean
    curve = events.curve(metric)
    print(f"{name} seed {seed}: {len(curve)} trial-epochs, best {metric} "
          f"{curve[-1] if curve else float('nan'):{SHOWN[metric]}} "
          f"({time.perf_counter() - started:.1f} s)", flush=True)  # fmt: skip
    return events


def _run_all(
    args: argparse.Namespace, c: Comparison, kept: SavedSearches, scratch: Path
) -> tuple[Results, list[str]]:
    """Every strategy's searches (those ``kept`` holds read, not run); a strategy whose
    search fails is left out, the others still run."""
    results: Results = {}
    failed: list[str] = []
    for name in c.strategies:
        for seed in range(args.search_seeds):
            events = kept.get(name, seed)
            if events is None:
                try:
                    events = _search(name, seed, args, c, results, scratch)
                except BadInput:
                    raise
                except Exception as e:  # one strategy's failure: the others still run
                    print(f"error: {name} seed {seed}: {type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''}",
                          file=sys.stderr, flush=True)  # fmt: skip
                    failed.append(name)
                    results.pop(name, None)
                    break
                kept.add(name, seed, events)
            results.setdefault(name, []).append((seed, events))
    return results, failed


def _report(args: argparse.Namespace, c: Comparison, results: Results) -> None:
    """The tables (and the plot) of the results."""
    grid = c.table.grid_cost()
    curves = {
        name: s.percent_curves(c.table, runs, c.objective, s.SEEDS_PER_CONFIG.get(name, 1))
        for name, runs in results.items()
    }
    what = FOUND[c.objective]
    s.report(curves, grid, c.budget, what + " (% of the grid's)")
    if c.objective in HELD_OUT:
        heldout = {}
        for name, runs in results.items():
            k = s.SEEDS_PER_CONFIG.get(name, 1)
            if rows := s.heldout_curves(c.table, runs, c.objective, k):
                heldout[name] = rows
        held = f"held out: {HELD_OUT[c.objective]} at unseen training seeds"
        if heldout:  # a one-seed table (`tabular.py mean`) has no unseen seed to value at
            s.report(heldout, grid, c.budget, held + " (% of the best config's there)")
    if args.plot:
        title = f"{c.table.manifest.get('problem', 'recorded')}, objective {args.objective}"
        s.plot(curves, grid, c.budget, what, title, args.plot)


@entry
def main(argv: Sequence[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    c = _comparison(p, args)
    kept = _saved(args, c)
    if kept.found:
        print(f"{len(kept.found)} searches of these settings in {args.results}: read, not run")
    # every search read from --results (the tables printed again): no Ray to start
    if any(
        kept.get(name, seed) is None for name in c.strategies for seed in range(args.search_seeds)
    ):
        _start_ray(args.address)
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="strategies-") as scratch:
            results, failed = _run_all(args, c, kept, Path(scratch))
    finally:
        import ray

        ray.shutdown()
    print(f"\n{args.search_seeds} search seeds x {len(c.strategies)} strategies in "
          f"{time.perf_counter() - started:.0f} s; budget {c.budget} trial-epochs "
          f"({args.budget:.0%} of the grid's {c.table.grid_cost()}); table "
          f"{args.table} ({c.table.manifest.get('command', '')}); form {args.form}")  # fmt: skip
    _report(args, c, results)
    if failed:
        print(f"\nfailed, left out above: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
