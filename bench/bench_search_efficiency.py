"""Search efficiency on the embedded world: ASHA + TPE against the full paper grid crossed
with a margin sweep, in trial-epochs.

Goal (BENCHMARKS.md, "Search efficiency"): ASHA + TPE comes within 1% of the grid's best
dev R@10 mean (``dev/r10_mean_best``) with <= 30% of the grid's compute. With
``--pareto``, also ``--objective both`` (TPE, FIFO) within the trial-epochs the ASHA
search used: its Pareto front (dev R@10 mean best, dev semantic best) against the grid's.

    python bench/bench_search_efficiency.py [--images 2000] [--scale 16] [--epochs 4]
        [--cycle-epochs 1] [--margins 0.1,0.2,0.3,0.4] [--asha-trials 16] [--pareto]
        [--max-concurrent 2] [--out DIR]
    python bench/bench_search_efficiency.py --smoke     # tiny, end to end, 2-3 minutes
    python bench/bench_search_efficiency.py --smoke --margins 0.1 --asha-trials 2

``--smoke`` is 120 images, the first two models at ``--scale 64``, margins 0.1 and 0.3,
2 epochs, 4 ASHA trials and ``--pareto``. A size flag given with it (``--images``,
``--scale``, ``--epochs``, ``--margins``, ``--asha-trials``) wins over the smoke's value,
so that a test can ask for an even smaller run of the same three searches.

Every search is the package's own (``gridsearch.driver.run_search`` with settings from
``gridsearch.settings.parse_args``), in this process, one after another, each with a
fresh local Ray (no dashboard), ``--max-concurrent`` trials at once with 1 CPU each
(default 2; with 1, one trial process trains a search's every trial), MLflow in sqlite and
the Tune/Optuna storage all under ``--out`` (a temporary directory by default). Every
trial has the same ``--cycle-epochs`` (learning-rate cycle and snapshot interval; the paper
runs 32 epochs in 4-epoch cycles, the CPU-sized bench a few epochs in 1-epoch cycles):

- the grid: the paper's 8 models (``PAPER_VARIANTS``: n 512/1024/2048 x GRU/LSTM with
  attention, and max pooling at n=1024), n divided by ``--scale``, crossed with
  ``--margins``; Optuna's grid sampler over (``variant``, ``margin``), as ``paper_grid``
  does over ``variant``; FIFO, every trial to ``--epochs``;
- ASHA + TPE: the project's defaults (``--scheduler asha``: trials compared at the ends of
  learning-rate cycles, epochs ``--cycle-epochs`` x 2**k, reduction factor 2, max
  ``--epochs``; Optuna's TPE, seed ``--seed``) over the *same discrete choices*, variant x
  margin (both categorical), ``--asha-trials`` trials;
- with ``--pareto``: ``--objective both --scheduler fifo`` (multi-objective TPE) with as
  many full trials as fit in the trial-epochs the ASHA search used.

Compute is counted in trial-epochs: the epochs a trial actually trained, i.e. the last
epoch it reported. Epoch 0 is the untrained model's evaluation and trains nothing, so it
counts 0 (its evaluation time is in the wall times). Per-trial results are read back from
MLflow (the driver's record: one nested run per trial, each epoch with ``step=epoch``).
"Trial-epochs to within 1%" is counted two ways: in completion order (whole trials, in the
order they stopped, up to and including the first whose ``dev/r10_mean_best`` >= 0.99 x
the grid's best), and as reached (every trained epoch of every trial, in the order the
driver recorded them, up to the first epoch report at or above the threshold; this also
counts the partial work of trials running alongside).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if not __package__:  # run as a file: the repository first on sys.path (see bench/__init__.py)
    sys.path[0] = str(Path(__file__).resolve().parents[1])

# As gridsearch.run sets them, before Ray is imported: our progress lines, not Tune's.
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")

from mlflow.tracking import MlflowClient

from bench._cli import entry, floats, parser
from bench._common import world
from gridsearch import spaces
from gridsearch.driver import run_search
from gridsearch.settings import SearchSettings, parse_args
from gridsearch.spaces import PAPER_VARIANTS, SearchSpace
from gridsearch.summary import pareto_front
from trainables import names

WITHIN = 0.99  # "within 1% of the grid's best": >= 0.99 x the grid's best dev R@10 mean
GOAL = 0.30  # <= 30% of the grid's compute
BATCH_SIZE = 64
# The size flags' values where not given: the full bench, and --smoke's (which also keeps
# the first two models and adds --pareto).
FULL: dict[str, Any] = {
    "images": 2000, "scale": 16, "epochs": 4, "margins": [0.1, 0.2, 0.3, 0.4], "asha_trials": 16
}  # fmt: skip
SMOKE: dict[str, Any] = {
    "images": 120, "scale": 64, "epochs": 2, "margins": [0.1, 0.3], "asha_trials": 4
}  # fmt: skip


@dataclass(frozen=True)
class VariantMargin:
    """The define-by-run function of both spaces: a paper model (``variant``, decoded into
    hidden_size, rnn_type and pooling, as ``paper_grid`` does) and a margin, both
    categorical. A class, so that Tune can pickle the searcher."""

    variants: dict[str, dict[str, Any]]
    margins: tuple[float, ...]

    def __call__(self, trial: Any) -> dict[str, Any]:
        variant = trial.suggest_categorical("variant", tuple(self.variants))
        margin = trial.suggest_categorical("margin", self.margins)
        return {**self.variants[variant], "margin": margin}


def scaled_variants(scale: int) -> dict[str, dict[str, Any]]:
    """PAPER_VARIANTS with n divided by ``scale``, named like them ("gru-32-attention")."""
    out = {}
    for variant in PAPER_VARIANTS.values():
        n = max(2, variant["hidden_size"] // scale)
        out[f"{variant['rnn_type']}-{n}-{variant['pooling']}"] = {**variant, "hidden_size": n}
    return out


def register_spaces(
    variants: dict[str, dict[str, Any]], margins: tuple[float, ...], cycle: int
) -> None:
    """The two spaces, put into the named-space registry for this process only (the driver
    looks ``--space`` up there); they differ only in the grid, which selects the sampler."""
    suggest = VariantMargin(variants, margins)
    fixed: dict[str, Any] = {"cycle_epochs": cycle, "snapshot_interval": cycle}
    if not any("batch_size" in v for v in variants.values()):  # else each variant sets it
        fixed["batch_size"] = BATCH_SIZE
    what = f"{len(variants)} models (n scaled) x margins {', '.join(map(str, margins))}"
    spaces.SPACES["bench_grid"] = SearchSpace(
        "bench_grid",
        f"{what} (grid)",
        suggest,
        fixed=fixed,
        grid={"variant": tuple(variants), "margin": margins},
    )
    spaces.SPACES["bench_tpe"] = SearchSpace("bench_tpe", f"{what} (TPE)", suggest, fixed=fixed)


@dataclass
class TrialRecord:
    trial_id: str
    variant: str
    margin: float
    epochs: int  # trial-epochs: the last epoch reported (epoch 0 trains nothing)
    retrieval: float  # dev/r10_mean_best at its last report
    semantic: float  # dev/semantic_best at its last report
    outcome: str
    done_at: int  # ms: when its last epoch was recorded
    # (timestamp ms, epoch, dev/r10_mean_best) for every epoch >= 1, in the recorded order
    reports: list[tuple[int, int, float]] = field(default_factory=list)


@dataclass
class SearchResult:
    label: str
    sampler: str
    wall_s: float
    trials: list[TrialRecord]  # in completion order

    @property
    def compute(self) -> int:
        return sum(t.epochs for t in self.trials)

    @property
    def best(self) -> float:
        return max((t.retrieval for t in self.trials if not math.isnan(t.retrieval)), default=0)


def search(
    label: str, space: str, extra: list[str], args: argparse.Namespace, store: str, out: Path
) -> SearchResult:
    argv = [
        "--space", space, "--data", store, "--epochs", str(args.epochs),
        "--seed", str(args.seed), "--max-concurrent", str(args.max_concurrent),
        "--cpus-per-trial", "1",
        "--no-dashboard", "--runs-dir", str(out / "runs"), "--experiment", label,
        *(["--address", args.address] if args.address else []), *extra,
    ]  # fmt: skip
    print(f"\n=== {label}: python -m gridsearch.run {' '.join(argv)}", flush=True)
    settings = SearchSettings.from_args(parse_args(argv))
    started = time.perf_counter()
    run_search(settings)
    wall = time.perf_counter() - started
    sampler = "grid" if spaces.SPACES[space].grid is not None else "TPE"
    return SearchResult(label, sampler, wall, read_trials(settings.tracking_uri, label))


def read_trials(tracking_uri: str, experiment: str) -> list[TrialRecord]:
    """Every trial of the search, from MLflow, in the order the trials stopped."""
    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, experiment
    runs = client.search_runs([found.experiment_id], "tags.`search.role` = 'trial'")
    trials = []
    for run in runs:
        metrics, params = run.data.metrics, run.data.params
        epochs = client.get_metric_history(run.info.run_id, "epoch")
        best = {
            int(m.step): m.value
            for m in client.get_metric_history(run.info.run_id, names.BEST_RETRIEVAL)
        }
        reports = sorted(
            (m.timestamp, int(m.step), best.get(int(m.step), math.nan))
            for m in epochs
            if m.step >= 1
        )
        trials.append(
            TrialRecord(
                trial_id=run.data.tags.get("tune.trial_id", run.info.run_id),
                variant=params.get("search.variant", "?"),
                margin=float(params.get("margin", "nan")),
                epochs=max((int(m.step) for m in epochs), default=0),
                retrieval=float(metrics.get(names.BEST_RETRIEVAL, math.nan)),
                semantic=float(metrics.get(names.BEST_SEMANTIC, math.nan)),
                outcome=run.data.tags.get("outcome", run.info.status),
                done_at=max((m.timestamp for m in epochs), default=run.info.end_time or 0),
                reports=reports,
            )
        )
    return sorted(trials, key=lambda t: t.done_at)


def to_threshold_by_completion(result: SearchResult, threshold: float) -> int | None:
    """Trial-epochs of whole trials in completion order, up to and including the first
    trial at or above ``threshold``; None if none reached it."""
    spent = 0
    for trial in result.trials:
        spent += trial.epochs
        if trial.retrieval >= threshold:
            return spent
    return None


def to_threshold_as_reached(result: SearchResult, threshold: float) -> int | None:
    """Trained epochs of all trials in the order they were recorded, up to the first epoch
    report at or above ``threshold``; None if none reached it."""
    events = sorted((stamp, best) for trial in result.trials for stamp, _, best in trial.reports)
    for spent, (_, best) in enumerate(events, start=1):
        if best >= threshold:
            return spent
    return None


def hypervolume(points: list[tuple[float, float]], ref: tuple[float, float]) -> float:
    """The area dominated by ``points`` (both maximised) above the reference point."""
    front = sorted({p for p in points if p[0] > ref[0] and p[1] > ref[1]}, key=lambda p: -p[0])
    area, top = 0.0, ref[1]
    for x, y in front:
        if y > top:
            area += (x - ref[0]) * (y - top)
            top = y
    return area


def front_of(result: SearchResult) -> list[TrialRecord]:
    valid = [t for t in result.trials if t.epochs > 0]
    return [valid[i] for i in pareto_front([(t.retrieval, t.semantic) for t in valid])]


def fmt(value: int | None, whole: int) -> tuple[str, str]:
    if value is None:
        return "never within budget", "-"
    return str(value), f"{value / whole:.1%}"


def report(args: argparse.Namespace, results: list[SearchResult]) -> None:
    grid, asha = results[0], results[1]
    threshold = WITHIN * grid.best
    print("\n## per-trial results (completion order)")
    for result in results:
        print(f"\n{result.label}:")
        cumulative = 0
        for i, t in enumerate(result.trials, start=1):
            cumulative += t.epochs
            mark = " *" if t.retrieval >= threshold else ""
            print(
                f"  {i:2d} {t.variant:<18} margin={t.margin:<4g} epochs={t.epochs} "
                f"cum={cumulative:3d}  R@10 best {t.retrieval:6.2f}  semantic best "
                f"{t.semantic:.4f}  {t.outcome}{mark}"
            )
    print(f"\n(* = dev R@10 mean best >= {WITHIN} x the grid's best = {threshold:.2f})")

    print("\n| search | trials | trial-epochs (% of grid) | best dev R@10 mean | "
          "trial-epochs to >= 0.99 x grid best: completion order (% of grid) | "
          "as reached (% of grid) | wall s |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for result in results:
        by_order = fmt(to_threshold_by_completion(result, threshold), grid.compute)
        as_reached = fmt(to_threshold_as_reached(result, threshold), grid.compute)
        print(
            f"| {result.label} ({result.sampler}) | {len(result.trials)} | {result.compute} "
            f"({result.compute / grid.compute:.0%}) | {result.best:.2f} | "
            f"{by_order[0]} ({by_order[1]}) | {as_reached[0]} ({as_reached[1]}) | "
            f"{result.wall_s:.0f} |"
        )
    needed = to_threshold_by_completion(asha, threshold)
    if needed is None:
        print(
            f"\nverdict: ASHA + TPE did not come within 1% of the grid's best "
            f"({grid.best:.2f}) in {asha.compute} trial-epochs "
            f"({asha.compute / grid.compute:.0%} of the grid's {grid.compute}); goal <= 30% "
            "NOT met in this run"
        )
    else:
        ratio = needed / grid.compute
        print(
            f"\nverdict: ASHA + TPE came within 1% of the grid's best ({grid.best:.2f}) after "
            f"{needed} of the grid's {grid.compute} trial-epochs = {ratio:.1%} "
            f"(goal <= {GOAL:.0%}: {'met' if ratio <= GOAL else 'NOT met'})"
        )
    check_determinism(grid, asha)
    if len(results) > 2:
        compare_fronts(grid, results[2])


def check_determinism(grid: SearchResult, other: SearchResult) -> None:
    """A config trained to the full epochs in both searches gives the same result when
    training is deterministic (same seed): the largest difference, as a check."""
    by_config = {(t.variant, t.margin): t for t in grid.trials}
    diffs = [
        abs(t.retrieval - by_config[(t.variant, t.margin)].retrieval)
        for t in other.trials
        if (t.variant, t.margin) in by_config
        and t.epochs == by_config[(t.variant, t.margin)].epochs
    ]
    repeats = len(other.trials) - len({(t.variant, t.margin) for t in other.trials})
    print(
        f"{other.label}: {repeats} trial(s) repeated a config it had already tried; "
        + (
            f"{len(diffs)} trained to the full epochs, largest |R@10 best - the grid's| for "
            f"the same config = {max(diffs):.3g}"
            if diffs
            else "none trained to the full epochs"
        )
    )


def compare_fronts(grid: SearchResult, pareto: SearchResult) -> None:
    grid_front, found = front_of(grid), front_of(pareto)
    every = [t for r in (grid, pareto) for t in r.trials if t.epochs > 0]
    ref = (min(t.retrieval for t in every) - 1e-9, min(t.semantic for t in every) - 1e-9)

    def hv(front: list[TrialRecord]) -> float:
        return hypervolume([(t.retrieval, t.semantic) for t in front], ref)

    def dominated(t: TrialRecord, by: list[TrialRecord]) -> bool:
        return any(o.retrieval >= t.retrieval and o.semantic >= t.semantic for o in by)

    print(
        f"\nPareto fronts (dev R@10 mean best, dev semantic best); {pareto.label} ran "
        f"{len(pareto.trials)} trials = {pareto.compute} trial-epochs "
        f"({pareto.compute / grid.compute:.0%} of the grid's {grid.compute}):"
    )
    print("\n| front | points | hypervolume (ref: worst of both searches) | "
          "points weakly dominated by the other front |")  # fmt: skip
    print("| --- | --- | --- | --- |")
    for label, front, other in (("grid", grid_front, found), (pareto.label, found, grid_front)):
        covered = sum(dominated(t, other) for t in front)
        print(f"| {label} | {len(front)} | {hv(front):.4f} | {covered} of {len(front)} |")
    for label, front in (("grid", grid_front), (pareto.label, found)):
        print(f"\n{label} front:")
        for t in front:
            print(f"  {t.retrieval:6.2f}  {t.semantic:.4f}  {t.variant} margin={t.margin:g}")
    print(
        f"\nhypervolume ratio {pareto.label} / grid: {hv(found) / max(hv(grid_front), 1e-12):.3f}"
    )


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, with every size flag not given filled in from ``SMOKE`` (with
    ``--smoke``) or ``FULL``; a bad one is argparse's one error line (exit 2)."""
    p = parser(__doc__)
    # Size flags default to None: what was not given comes from SMOKE or FULL below, so
    # that a flag given with --smoke wins over the smoke's value.
    p.add_argument("--images", type=int, help="embedded world size (default: 2000)")
    p.add_argument("--scale", type=int, help="divides the paper's n (default: 16)")
    p.add_argument("--epochs", type=int, help="epochs per trial, the cap (default: 4)")
    p.add_argument("--cycle-epochs", type=int, default=1,
                   help="learning-rate cycle (and snapshot interval)")  # fmt: skip
    p.add_argument("--margins", type=floats, help="comma-separated (default: 0.1,0.2,0.3,0.4)")
    p.add_argument("--asha-trials", type=int,
                   help="the ASHA + TPE search's trials (default: 16)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="sampler and training seed")
    p.add_argument("--max-concurrent", type=int, default=2, help="trials at once, 1 CPU each")
    p.add_argument("--pareto", action="store_true", help="also --objective both")
    p.add_argument("--store", default=None, help="an existing store instead")
    p.add_argument("--out", type=Path, default=None,
                   help="keep everything here (default: a temporary folder, removed "
                   "after)")  # fmt: skip
    p.add_argument("--address", default=None,
                   help="join this Ray cluster (default: each search starts its own)")  # fmt: skip
    p.add_argument("--smoke", action="store_true",
                   help="tiny: 120 images, 2 models, 2 margins, 2 epochs, 4 ASHA trials, "
                   "--pareto; a size flag given with it wins")  # fmt: skip
    args = p.parse_args(argv)
    for name, value in (SMOKE if args.smoke else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.pareto = args.pareto or args.smoke
    if min(args.epochs, args.asha_trials, args.scale, args.cycle_epochs, args.max_concurrent) < 1:
        p.error(
            "--epochs, --cycle-epochs, --asha-trials, --scale and --max-concurrent must be positive"
        )
    return args


@entry
def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    margins = tuple(sorted(set(args.margins)))
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("mlflow", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    store = world(args.store, args.images)
    variants = scaled_variants(args.scale)
    if args.smoke:  # the first two models: every search and the report's every row, small
        variants = dict(list(variants.items())[:2])
    register_spaces(variants, margins, args.cycle_epochs)
    grid_size = len(variants) * len(margins)
    out = args.out.resolve() if args.out else Path(tempfile.mkdtemp(prefix="bench-search-"))
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"{grid_size} grid configs: {', '.join(variants)} x margins "
        f"{', '.join(map(str, margins))}; batch {BATCH_SIZE}, {args.epochs} epochs in "
        f"{args.cycle_epochs}-epoch learning-rate cycles, store "
        f"{store}; everything under {out}; {os.cpu_count()} cores"
    )
    started = time.perf_counter()
    try:
        results = [
            search("grid", "bench_grid", ["--scheduler", "fifo"], args, store, out),
            search(
                "asha-tpe",
                "bench_tpe",
                ["--scheduler", "asha", "--num-samples", str(args.asha_trials)],
                args,
                store,
                out,
            ),
        ]
        if args.pareto:
            trials = max(1, results[1].compute // args.epochs)
            results.append(
                search(
                    "pareto-tpe",
                    "bench_tpe",
                    ["--objective", "both", "--scheduler", "fifo", "--num-samples", str(trials)],
                    args,
                    store,
                    out,
                )
            )
        report(args, results)
        print(f"\nwhole benchmark: {time.perf_counter() - started:.0f} s")
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
