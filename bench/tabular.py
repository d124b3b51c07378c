"""A recorded (tabular) search benchmark: every configuration of a discretised space
trained once per training seed, every epoch's metrics kept, served back to Ray Tune.

Training is deterministic per seed, so a search problem can be recorded once and replayed
many times, as the tabular benchmarks of the HPO literature do. Recording runs the
package's own search (``gridsearch.driver.run_search``: the grid sampler over the space,
FIFO, every trial to the last epoch) once per training seed and keeps what every trial
reported to Tune, epoch by epoch (``result.json`` in its trial folder), in one Parquet
table beside a manifest that holds the command, the world and the code version::

    python bench/tabular.py record --out bench/recorded/paper_margin --images 1000 \\
        --scale 32 --epochs 4 --margins 0.05,0.15,0.25,0.35,0.45 --lr 0.016 --seeds 0,1

The paper_margin problem is the paper's 8 models (``PAPER_VARIANTS``, n divided by
``--scale``) crossed with the margins, both categorical, as in
``bench_search_efficiency.py``. The lr_batch problem (``--problem lr_batch``) is wider:
each of ``--variants`` crossed with the learning-rate bounds and the batch size, folded
into one categorical "variant" ("gru-32-max/lr4e-03..1e-06/b64")::

    python bench/tabular.py record --problem lr_batch --out bench/recorded/lr_batch \
        --variants gru-32-max,lstm-64-attention --margins 0.25 --seeds 0,1

:func:`replay_trainable` is a Tune function trainable
that looks a trial's (variant, margin, seed) up in the table and reports the recorded
epochs, with a checkpoint per epoch (so HyperBand can pause and resume it), sleeping
``time_scale`` x the recorded training seconds before each so that trials running side
by side interleave as they did. :mod:`bench_strategies` runs whole searches on it.

``python bench/tabular.py mean --table bench/recorded/lr_batch --out DIR`` derives the
same problem at the mean of its training seeds (:func:`seed_mean`): a search of it finds
the configs that are best on average, not one seed's luck. ``python bench/tabular.py join
--table A --table B --out DIR`` joins recordings of one problem at other seeds (recorded
on other machines, or later) into one table (:func:`join`). ``python bench/tabular.py seeds
--table DIR`` says how much of the ranking of configs survives a change of training seed,
and why (:func:`seed_agreement`: how far the seed moves a config's score against how far
the configs lie apart).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if not __package__:  # run as a file: the repository first on sys.path (see bench/__init__.py)
    sys.path[0] = str(Path(__file__).resolve().parents[1])

# As gridsearch.run sets them, before Ray is imported.
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")

import pyarrow as pa
import pyarrow.parquet as pq

from bench._cli import BadInput, entry, parser
from bench._common import REPO, world
from trainables import names

TABLE_FILE = "table.parquet"
MANIFEST_FILE = "manifest.json"
KEYS = ("variant", "margin")  # the searched parameters a recorded config is looked up by
# What Tune adds to every result (not the trainable's own metrics).
_TUNE_KEYS = frozenset({
    "checkpoint_dir_name", "config", "date", "done", "hostname", "iterations_since_restore",
    "node_ip", "pid", "should_checkpoint", "time_since_restore", "time_this_iter_s",
    "time_total_s", "timestamp", "training_iteration", "trial_id", *names.TRIAL_FLAGS,
})  # fmt: skip
DEFAULT_MARGINS = "0.05,0.1,0.15,0.2,0.25,0.3,0.35,0.4,0.45,0.5"


@dataclass(frozen=True)
class Curve:
    """One recorded trial: its searched values, training seed and every epoch's metrics
    (epoch 0, the untrained model, first)."""

    variant: str
    margin: float
    seed: int
    config: dict[str, Any]  # the config Tune gave the trial
    epochs: list[dict[str, float]]


class RecordedTable:
    """The recorded curves, looked up by (variant, margin, seed)."""

    def __init__(self, curves: Iterable[Curve], manifest: Mapping[str, Any] | None = None):
        self.curves = {(c.variant, _key(c.margin), c.seed): c for c in curves}
        self.manifest = dict(manifest or {})
        recorded = {c.variant for c in self.curves.values()}
        # the space's order (a sampler's draws depend on the order of the choices)
        order = [v for v in self.manifest.get("variants", ()) if v in recorded]
        self.variants = tuple(order or sorted(recorded))
        self.margins = tuple(sorted({c.margin for c in self.curves.values()}))
        self.seeds = tuple(sorted({c.seed for c in self.curves.values()}))
        self.max_epoch = max(len(c.epochs) - 1 for c in self.curves.values())

    def curve(self, variant: str, margin: float, seed: int) -> Curve:
        try:
            return self.curves[(variant, _key(margin), seed)]
        except KeyError:
            raise KeyError(
                f"no recorded trial for variant {variant!r}, margin {margin!r}, seed {seed}"
            ) from None

    def seed_run(self, first: int, k: int) -> list[int]:
        """``k`` recorded seeds from ``first`` on, in the table's order, wrapping."""
        if k > len(self.seeds):
            raise ValueError(f"{k} seeds per config, but the table has {len(self.seeds)}")
        start = self.seeds.index(first)
        return [self.seeds[(start + i) % len(self.seeds)] for i in range(k)]

    def configs(self) -> list[tuple[str, float]]:
        return [(v, m) for v in self.variants for m in self.margins]

    def best(self, seed: int, metric: str = names.BEST_RETRIEVAL) -> float:
        """The grid's best: the largest final ``metric`` over every config of ``seed``."""
        return max(c.epochs[-1][metric] for (_, _, s), c in self.curves.items() if s == seed)

    def grid_cost(self) -> int:
        """Trial-epochs of the full grid (epoch 0 trains nothing)."""
        return len(self.configs()) * self.max_epoch

    @classmethod
    def read(cls, folder: str | os.PathLike[str]) -> RecordedTable:
        folder = Path(folder)
        rows = pq.read_table(folder / TABLE_FILE).to_pylist()
        manifest = json.loads((folder / MANIFEST_FILE).read_text())
        grouped: dict[tuple[str, float, int], list[dict[str, Any]]] = {}
        for row in rows:
            grouped.setdefault((row["variant"], row["margin"], row["seed"]), []).append(row)
        curves = []
        for (variant, margin, seed), group in grouped.items():
            group.sort(key=lambda r: r["epoch"])
            if [r["epoch"] for r in group] != list(range(len(group))):
                raise ValueError(f"{folder}: epochs of {variant}/{margin}/{seed} are not 0..n")
            config = json.loads(group[0]["config"])
            epochs = [json.loads(r["metrics"]) for r in group]
            curves.append(Curve(variant, margin, seed, config, epochs))
        return cls(curves, manifest)

    def write(self, folder: str | os.PathLike[str]) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        rows = [
            {
                "variant": c.variant,
                "margin": c.margin,
                "seed": c.seed,
                "epoch": epoch,
                "dev_r10_mean": m.get(names.PRIMARY_RETRIEVAL, math.nan),
                "dev_semantic": m.get(names.PRIMARY_SEMANTIC, math.nan),
                "test_r10_mean": m.get(names.key(names.TEST, "r10_mean"), math.nan),
                "metrics": json.dumps(m, sort_keys=True),
                "config": json.dumps(c.config, sort_keys=True),
            }
            for c in sorted(self.curves.values(), key=lambda c: (c.seed, c.variant, c.margin))
            for epoch, m in enumerate(c.epochs)
        ]
        tmp = folder / f".{TABLE_FILE}.tmp"
        pq.write_table(pa.Table.from_pylist(rows), tmp, compression="zstd")
        digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
        manifest = {**self.manifest, "rows": len(rows), "table_sha256": digest}
        os.replace(tmp, folder / TABLE_FILE)
        (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
        self.manifest = manifest


def _key(margin: float) -> float:
    return round(float(margin), 6)


def variant_margin(config: Mapping[str, Any]) -> tuple[str, float]:
    """The recorded (variant, margin) a trial's config names."""
    return config["variant"], float(config["margin"])


def replay_trainable(
    config: dict[str, Any],
    table: RecordedTable,
    time_scale: float,
    seeds_per_config: int = 1,
    decode: Callable[[Mapping[str, Any]], tuple[str, float]] | None = None,
) -> None:
    """Report the recorded epochs of the trial's (variant, margin, seed), each with a
    checkpoint that holds its epoch, resuming after the checkpoint Tune hands back. With
    ``seeds_per_config`` k > 1, the mean of k recorded seeds from the trial's on (in the
    table's order, wrapping), combined as ``trainables.group`` combines live ones.
    ``decode``: the config's (variant, margin), for a searcher whose configs name them
    otherwise (default: :func:`variant_margin`)."""
    from ray import tune

    from trainables.group import combine

    variant, margin = (decode or variant_margin)(config)
    curves = [
        table.curve(variant, margin, seed)
        for seed in table.seed_run(int(config["seed"]), seeds_per_config)
    ]
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            start = int((Path(folder) / "epoch").read_text()) + 1
    for epoch in range(start, len(curves[0].epochs)):
        metrics = combine([c.epochs[epoch] for c in curves])
        if time_scale > 0:
            time.sleep(time_scale * (metrics.get("time/train_s", 0.0) or 0.0))
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "epoch").write_text(str(epoch))
            tune.report(dict(metrics), checkpoint=tune.Checkpoint.from_directory(folder))


def read_table(folder: Path, flag: str = "--table") -> RecordedTable:
    """``RecordedTable.read`` for a command's ``flag``: a folder that holds no whole
    recording is one ``error:`` line naming the flag and the folder, not a traceback."""
    try:
        return RecordedTable.read(folder)
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as err:
        raise BadInput(
            f"error: {flag}: {folder} holds no whole recording (`tabular.py record` writes "
            f"{TABLE_FILE} and {MANIFEST_FILE} there): {str(err).splitlines()[0][:200]}"
        ) from None


def read_trials(
    experiment_path: str | os.PathLike[str], seed: int, variants: Mapping[str, Mapping[str, Any]]
) -> list[Curve]:
    """Every trial's reported epochs from a finished Tune experiment folder, each trial (a
    group of one) named by the one of ``variants`` whose settings its config holds."""
    from trainables.tune import group_configs, member_metrics

    curves = []
    for result in sorted(Path(experiment_path).glob("*/result.json")):
        reports = [json.loads(line) for line in result.read_text().splitlines() if line.strip()]
        if not reports:
            continue
        (config,) = group_configs(reports[0]["config"])
        epochs = [
            {k: v for k, v in member_metrics(r)[0].items() if k not in _TUNE_KEYS} for r in reports
        ]
        if [int(e["epoch"]) for e in epochs] != list(range(len(epochs))):
            raise RuntimeError(f"{result}: epochs are not 0..n (a restarted trial?)")
        named = [
            n for n, keys in variants.items() if all(config.get(k) == v for k, v in keys.items())
        ]
        if len(named) != 1:
            raise RuntimeError(f"{result}: its config matches {len(named)} variants, not one")
        curves.append(Curve(named[0], config["margin"], seed, config, epochs))
    return curves


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def record_problem(
    store: str,
    variants: dict[str, dict[str, Any]],
    margins: Sequence[float],
    *,
    epochs: int,
    cycle_epochs: int,
    seeds: Sequence[int],
    scratch: Path,
    write: Callable[[str], None] | None = None,
    address: str | None = None,
    concurrent: int = 2,
) -> list[Curve]:
    """Run the grid over ``variants`` x ``margins`` once per seed with the package's own
    driver (FIFO, ``concurrent`` trials at a time with 1 CPU each; ``address``: on that Ray
    cluster) and keep every trial's epochs; ``write`` (default: print) takes the lines."""
    # no ``print`` as a default: this module travels to Ray by value, and a default is
    # pickled with it; once Ray's driver shows a worker's death it replaces builtins.print
    # (tqdm_ray), and the original then no longer pickles
    write = write or print
    from bench.bench_search_efficiency import register_spaces
    from gridsearch.driver import run_search
    from gridsearch.settings import SearchSettings, parse_args

    register_spaces(variants, tuple(margins), cycle_epochs)
    curves: list[Curve] = []
    for seed in seeds:
        argv = [
            "--space", "bench_grid", "--data", store, "--epochs", str(epochs),
            "--seed", str(seed), "--scheduler", "fifo", "--max-concurrent", str(concurrent),
            "--cpus-per-trial", "1", "--no-dashboard", "--no-baselines",
            "--runs-dir", str(scratch), "--experiment", f"record-seed{seed}",
            *(["--address", address] if address else []),
        ]  # fmt: skip
        settings = SearchSettings.from_args(parse_args(argv))
        started = time.perf_counter()
        run_search(settings, write=write)
        found = read_trials(settings.experiment_path, seed, variants)
        write(f"seed {seed}: {len(found)} trials in {time.perf_counter() - started:.0f} s")
        curves += found
    return curves


def lr_batch_variants(
    models: dict[str, dict[str, Any]],
    lr_max: Sequence[float],
    lr_min: Sequence[float],
    batch_sizes: Sequence[int],
) -> dict[str, dict[str, Any]]:
    """The lr_batch problem's variants: every model x learning-rate bounds x batch size,
    named like "gru-32-max/lr4e-03..1e-06/b64" (pairs with lr_min > lr_max left out)."""
    return {
        f"{name}/lr{hi:.0e}..{lo:.0e}/b{batch}": {
            **model, "lr_max": hi, "lr_min": lo, "batch_size": batch,
        }
        for name, model in models.items()
        for hi in lr_max
        for lo in lr_min
        if lo <= hi
        for batch in batch_sizes
    }  # fmt: skip


def _floats(flag: str, text: str) -> list[float]:
    try:
        return sorted({float(x) for x in text.split(",")})
    except ValueError:
        raise BadInput(f"error: {flag}: got {text!r}, expected comma-separated numbers") from None


def record(args: argparse.Namespace) -> RecordedTable:
    """Record the problem the arguments describe and write its table."""
    from bench.bench_search_efficiency import scaled_variants

    store = world(args.store, args.images)
    models = scaled_variants(args.scale)
    if args.variants:
        wanted = args.variants.split(",")
        unknown = [v for v in wanted if v not in models]
        if unknown:
            raise BadInput(f"error: --variants: unknown {unknown}; expected some of "
                             f"{', '.join(models)}")  # fmt: skip
        models = {v: models[v] for v in models if v in wanted}
    if args.lr is not None:  # every model at this learning rate, recorded with the variant
        models = {name: {**model, "lr_max": args.lr} for name, model in models.items()}
    variants = models
    if args.problem == "lr_batch":
        batch_sizes = [int(b) for b in _floats("--batch-sizes", args.batch_sizes)]
        variants = lr_batch_variants(
            models,
            _floats("--lr-max", args.lr_max),
            _floats("--lr-min", args.lr_min),
            batch_sizes,
        )
    margins = tuple(_floats("--margins", args.margins))
    curves = record_problem(
        store,
        variants,
        margins,
        epochs=args.epochs,
        cycle_epochs=args.cycle_epochs,
        seeds=[int(s) for s in args.seeds.split(",")],
        scratch=Path(tempfile.mkdtemp(prefix="tabular-")),
    )
    manifest = {
        "problem": args.problem,
        "command": "python bench/tabular.py " + " ".join(sys.argv[1:]),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": _git_commit(),
        "store_manifest_sha256": hashlib.sha256(
            (Path(store) / "manifest.json").read_bytes()
        ).hexdigest(),
        "images": args.images,
        "scale": args.scale,
        "epochs": args.epochs,
        "cycle_epochs": args.cycle_epochs,
        "variants": variants,  # in the space's order
        "margins": list(margins),
        "seeds": sorted({c.seed for c in curves}),
        "load_average_at_end": os.getloadavg()[0],
    }
    table = RecordedTable(curves, manifest)
    table.write(args.out)
    return table


def seed_mean(table: RecordedTable, seeds: Sequence[int] | None = None) -> RecordedTable:
    """The problem with the training seeds' noise averaged out: one curve per config, at
    seed 0, whose every epoch is the mean over ``seeds`` (default: all the table's) of
    that config's recorded epochs (``trainables.group.combine``, the mean that
    ``--seeds-per-config`` selects on; times are the seeds' mean, one trial's cost). A
    search of it costs what a search of one seed does, but finds the configs that are
    best on average rather than one seed's luck: the tabular benchmarks of the HPO
    literature report searches on such seed means."""
    from trainables.group import combine

    seeds = list(table.seeds if seeds is None else seeds)
    missing = [s for s in seeds if s not in table.seeds]
    if len(set(seeds)) < 2 or len(set(seeds)) != len(seeds) or missing:
        raise ValueError(
            f"expected two or more different seeds of the table's {list(table.seeds)}, got {seeds}"
        )
    curves = []
    for variant, margin in table.configs():
        recorded = [table.curve(variant, margin, s) for s in seeds]
        epochs = []
        for epoch in range(len(recorded[0].epochs)):
            mean = combine([c.epochs[epoch] for c in recorded])
            epochs.append(
                {k: v / len(seeds) if k.startswith("time/") else v for k, v in mean.items()}
            )
        config = {**recorded[0].config, "seed": 0}
        curves.append(Curve(variant, recorded[0].margin, 0, config, epochs))
    manifest = {
        **table.manifest,
        "seed_mean_of": seeds,
        "seeds": [0],
        "derived_from_table_sha256": table.manifest.get("table_sha256"),
        "command": "python bench/tabular.py " + " ".join(sys.argv[1:]),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    return RecordedTable(curves, manifest)


# What makes recordings one problem: their curves may be joined only where these agree.
PROBLEM_KEYS = ("problem", "images", "scale", "epochs", "cycle_epochs", "variants", "margins")
# What each part of a joined table keeps of its own manifest: how and where it was made.
PART_KEYS = ("command", "created", "commit", "store_manifest_sha256", "seeds",
             "load_average_at_end", "table_sha256")  # fmt: skip


def join(tables: Mapping[str, RecordedTable]) -> RecordedTable:
    """One problem recorded in parts, a part per seed or seeds (on other machines, or on
    another day), as one table: every part must record the same problem
    (:data:`PROBLEM_KEYS`) at seeds no other part has. Each part's provenance is kept
    under ``parts``, its store's manifest hash included: parts recorded on stores with
    different manifests are joined, and the hashes say so."""
    named = list(tables.items())
    if len(named) < 2:
        raise ValueError(f"expected two or more recordings, got {len(named)}")
    first_name, first = named[0]
    seen: dict[int, str] = {}
    for name, table in named:
        for key in PROBLEM_KEYS:
            if table.manifest.get(key) != first.manifest.get(key):
                raise ValueError(
                    f"{name} records another problem than {first_name}: its {key} is "
                    f"{json.dumps(table.manifest.get(key))[:80]}, expected "
                    f"{json.dumps(first.manifest.get(key))[:80]}"
                )
        for seed in table.seeds:
            if seed in seen:
                raise ValueError(f"{name} and {seen[seed]} both hold seed {seed}")
            seen[seed] = name
    manifest = {
        **{k: first.manifest[k] for k in PROBLEM_KEYS if k in first.manifest},
        "command": "python bench/tabular.py " + " ".join(sys.argv[1:]),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": _git_commit(),
        "seeds": sorted(seen),
        "parts": [  # a joined table's own parts, so that joins of joins keep every one
            part
            for _, t in named
            for part in t.manifest.get("parts")
            or [{k: t.manifest[k] for k in PART_KEYS if k in t.manifest}]
        ],
    }
    return RecordedTable([c for _, t in named for c in t.curves.values()], manifest)


def _shown(value: float) -> str:
    """A metric's value in a line: a correlation (within 1) to three places, R@K to two."""
    return f"{value:.3f}" if abs(value) < 1 else f"{value:.2f}"


def seed_agreement(table: RecordedTable, metric: str = names.BEST_RETRIEVAL) -> list[str]:
    """How much of the ranking of configs survives a change of training seed: for every
    pair of seeds, the Spearman correlation of the configs' final ``metric``, whether
    each seed's best config is within 1% of the other seed's best there, the overlap
    of the top 10, and how close the top 10 lie (the tenth's share of the best, per seed:
    where it is near 100%, which of them a seed puts first is the seed's draw). With three
    or more seeds, also what selecting on the mean of all seeds but one is worth at the
    one left out. Last, over all seeds, how far the seed moves a config's score against
    how far the configs lie apart, and the correlation between two seeds that this lets
    one expect: the one-way intraclass correlation ICC(1) (Shrout & Fleiss 1979), the
    classical test-retest reliability, with the configs as subjects and the seeds as
    repeated measurements (a few lines here: neither scipy nor torch has it)."""
    from scipy.stats import spearmanr

    lines = []
    final = {
        seed: {cfg: table.curve(*cfg, seed).epochs[-1][metric] for cfg in table.configs()}
        for seed in table.seeds
    }
    for i, a in enumerate(table.seeds):
        for b in table.seeds[i + 1 :]:
            configs = table.configs()
            rho = spearmanr([final[a][c] for c in configs], [final[b][c] for c in configs])[0]
            lines.append(f"seeds {a} and {b}: Spearman {rho:.3f} over {len(configs)} configs")
            for x, y in ((a, b), (b, a)):
                best = max(configs, key=final[x].__getitem__)
                there = final[y][best] / max(final[y].values())
                lines.append(
                    f"  seed {x}'s best ({best[0]}, margin {best[1]:g}: {_shown(final[x][best])}) "
                    f"at seed {y}: {_shown(final[y][best])} = {100 * there:.1f}% of seed {y}'s best"
                    f" ({'within' if there >= 0.99 else 'NOT within'} 1%)"
                )
            k = min(10, len(configs))
            top = [set(sorted(configs, key=final[s].__getitem__, reverse=True)[:k]) for s in (a, b)]
            lines.append(f"  top-{k} overlap: {len(top[0] & top[1])} of {k}")
            spread = [
                sorted(final[s].values(), reverse=True)[k - 1] / max(final[s].values())
                for s in (a, b)
            ]
            lines.append(
                f"  the top {k}'s lowest at {100 * spread[0]:.1f}% (seed {a}) and"
                f" {100 * spread[1]:.1f}% (seed {b}) of the best"
            )
    if len(table.seeds) > 2:  # selecting on the others' mean, valued at the seed left out
        for seed in table.seeds:
            others = [s for s in table.seeds if s != seed]
            mean = {c: sum(final[s][c] for s in others) / len(others) for c in table.configs()}
            best = max(mean, key=mean.__getitem__)
            there = final[seed][best] / max(final[seed].values())
            lines.append(
                f"the best on the mean of seeds {', '.join(map(str, others))} ({best[0]}, "
                f"margin {best[1]:g}: {_shown(mean[best])}) at seed {seed}: "
                f"{_shown(final[seed][best])} = {100 * there:.1f}% of seed {seed}'s best"
                f" ({'within' if there >= 0.99 else 'NOT within'} 1%)"
            )
    lines.append(reliability([[final[s][c] for s in table.seeds] for c in table.configs()]))
    return lines


def reliability(scores: Sequence[Sequence[float]]) -> str:
    """``scores[config][seed]``: the within-config (the seed's) and between-config standard
    deviations of a one-way random-effects ANOVA, and ICC(1) = (MSB - MSW) / (MSB + (k - 1)
    MSW), the correlation to expect between the scores of two seeds."""
    import numpy as np

    x = np.asarray(scores, dtype=np.float64)
    n, k = x.shape
    means = x.mean(axis=1)
    msb = k * ((means - means.mean()) ** 2).sum() / (n - 1)
    msw = ((x - means[:, None]) ** 2).sum() / (n * (k - 1))
    icc = (msb - msw) / (msb + (k - 1) * msw)
    between = max(msb - msw, 0.0) / k
    return (
        f"over seeds and configs: the seed moves a config's score by an sd of "
        f"{msw**0.5:.4g}, the configs lie apart by an sd of {between**0.5:.4g} beyond it; "
        f"the correlation to expect between two seeds, ICC(1): {icc:.3f}"
    )


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = parser(__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    shown = p.formatter_class  # the defaults in the commands' help too
    r = sub.add_parser("record", help="train the grid once per seed and keep every epoch",
                       formatter_class=shown)  # fmt: skip
    r.add_argument("--out", type=Path, required=True, help="folder for the table")
    r.add_argument("--images", type=int, default=1000, help="embedded world size")
    r.add_argument("--scale", type=int, default=32, help="divides the paper's n")
    r.add_argument("--epochs", type=int, default=4, help="epochs per trial")
    r.add_argument("--cycle-epochs", type=int, default=1, help="learning-rate cycle")
    r.add_argument("--margins", default=DEFAULT_MARGINS, help="comma-separated")
    r.add_argument("--seeds", default="0,1", help="comma-separated training seeds")
    r.add_argument("--variants", default="", help="comma-separated names (default: all 8)")
    r.add_argument("--store", default=None, help="an existing store instead of the world")
    r.add_argument("--problem", choices=("paper_margin", "lr_batch"), default="paper_margin",
                   help="paper_margin: the --variants x --margins; lr_batch: the --variants "
                   "x --lr-max x --lr-min x --batch-sizes x --margins")  # fmt: skip
    r.add_argument("--lr", type=float, default=None,
                   help="paper_margin: every model's lr_max (default: the paper's, 1e-3; "
                   "a CPU-sized one is 0.016)")  # fmt: skip
    r.add_argument("--lr-max", default="1e-3,2e-3,4e-3,8e-3", help="lr_batch: comma-separated")
    r.add_argument("--lr-min", default="1e-6,1e-4", help="lr_batch: comma-separated")
    r.add_argument("--batch-sizes", default="32,64,128", help="lr_batch: comma-separated")
    a = sub.add_parser("seeds", help="how much of the ranking survives a change of seed",
                       formatter_class=shown)  # fmt: skip
    a.add_argument("--table", type=Path, required=True, help="a folder `record` wrote")
    a.add_argument("--metric", action="append", default=None,
                   help="a metric the trials recorded at their last epoch, e.g. "
                   "test/semantic or dev/sickr_cosine_pearson; repeatable (default: "
                   f"{names.BEST_RETRIEVAL} and {names.BEST_SEMANTIC}, what a search "
                   "selects on)")  # fmt: skip
    m = sub.add_parser(
        "mean", help="the problem at the mean of its training seeds", formatter_class=shown
    )
    m.add_argument("--table", type=Path, required=True, help="a folder `record` wrote")
    m.add_argument("--out", type=Path, required=True, help="folder for the derived table")
    m.add_argument("--seeds", default="", help="comma-separated (default: all the table's)")
    j = sub.add_parser("join", help="one problem recorded in parts (other seeds), as one table",
                       formatter_class=shown)  # fmt: skip
    j.add_argument("--table", type=Path, action="append", required=True,
                   help="a folder `record` wrote; two or more")  # fmt: skip
    j.add_argument("--out", type=Path, required=True, help="folder for the joined table")
    return p.parse_args(argv)


@entry
def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.command == "record":
        table = record(args)
        print(f"{len(table.curves)} curves, {table.manifest['rows']} rows -> {args.out}")
    elif args.command == "seeds":
        table = read_table(args.table)
        metrics = args.metric or [names.BEST_RETRIEVAL, names.BEST_SEMANTIC]
        last = [c.epochs[-1] for c in table.curves.values()]
        for metric in metrics:
            if not all(type(epoch.get(metric)) in (int, float) for epoch in last):
                known = sorted(set.intersection(*(set(epoch) for epoch in last)))
                raise BadInput(
                    f"error: --metric: {metric!r} is not recorded at every trial's last "
                    f"epoch in {args.table}; these are: {', '.join(known)}"
                )
        for metric in metrics:
            print(f"{metric} at the last epoch:")
            print("\n".join(seed_agreement(table, metric)))
    elif args.command == "mean":
        table = read_table(args.table)
        try:
            seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else None
        except ValueError:
            raise BadInput(f"error: --seeds: got {args.seeds!r}, expected "
                             "comma-separated integers") from None  # fmt: skip
        try:
            derived = seed_mean(table, seeds)
        except ValueError as e:
            raise BadInput(f"error: --seeds: {e}") from None
        derived.write(args.out)
        print(f"{len(derived.curves)} curves, the mean of seeds "
              f"{derived.manifest['seed_mean_of']} -> {args.out}")  # fmt: skip
    elif args.command == "join":
        if (args.out / TABLE_FILE).exists() or (args.out / MANIFEST_FILE).exists():
            raise BadInput(f"error: --out: {args.out} already holds a recording; "
                           "join writes a new folder")  # fmt: skip
        try:
            joined = join({str(folder): read_table(folder) for folder in args.table})
        except ValueError as e:
            raise BadInput(f"error: --table: {e}") from None
        joined.write(args.out)
        stores = {p.get("store_manifest_sha256") for p in joined.manifest["parts"]}
        print(f"{len(joined.curves)} curves, seeds {joined.manifest['seeds']} -> {args.out}"
              + (f" (recorded on {len(stores)} stores whose manifests differ: their hashes "
                 "are under parts in the manifest)" if len(stores) > 1 else ""))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
