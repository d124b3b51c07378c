"""The checks of a search's flags, each before anything is read or written (for
``gridsearch.settings``, a new search's and a ``--resume``'s); bad input is a
``SearchError`` naming its flag. ``SearchError`` lives here, the lowest module that
raises it; ``gridsearch.settings`` is where the rest of the package imports it from."""

from __future__ import annotations

import argparse
import math
import re

from gridsearch._layout import RunsLayout, sqlite_file

__all__ = [
    "SearchError",
    "check_amounts",
    "check_args",
    "check_count",
    "check_experiment_name",
    "check_tracking_uri",
    "shorten",
]

# Where MLflow can keep a search: its local database, a tracking server, or a database URL.
TRACKING_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks")


class SearchError(Exception):
    """Bad input or an unusable environment, reported without a traceback."""


EXPERIMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
SEED_LIMIT = 2**32  # Optuna's samplers and numpy's RandomState take seeds below 2**32


def check_args(args: argparse.Namespace) -> None:
    """Every flag's value, before anything is read or written; SearchError naming it."""
    if args.space and args.space_file:
        raise SearchError("give --space or --space-file, not both")
    if not (args.space or args.space_file):
        raise SearchError("give --space NAME (see --list-spaces) or --space-file FILE")
    if args.data_via == "uri" and not args.data:
        raise SearchError("--data-via uri needs --data (a store every node can read)")
    if args.experiment is not None:
        check_experiment_name(args.experiment)
    if args.warm_start is not None:
        check_experiment_name(args.warm_start, flag="--warm-start")
        if not RunsLayout.at(args.runs_dir).record(args.warm_start).is_file():
            raise SearchError(
                f"--warm-start {args.warm_start}: no search of that name in "
                f"{RunsLayout.at(args.runs_dir).root} (expected its record "
                f"searches/{args.warm_start}.json)"
            )
    _check_counts(args)
    check_amounts(args)
    if args.tracking_uri is not None:
        check_tracking_uri(args.tracking_uri)


# The most each count may be, and what each unit of it holds (for the message: a count
# past its bound says what it would hold, the memory of its references alone as a floor)
COUNT_BOUNDS: dict[str, tuple[int, str]] = {
    "num_samples": (100_000, "a Tune trial the driver keeps in memory and in its "
                    "experiment state, an Optuna trial and an MLflow run"),
    "epochs": (100_000, "an evaluation, an MLflow metric step and a checkpoint"),
    "max_concurrent": (10_000, "a Ray worker process with PyTorch loaded"),
    "max_failures": (1_000, "a retry of a failed trial from its checkpoint"),
    "seeds_per_config": (64, "one more model and its optimiser state in the same trial's "
                         "worker, and one more configuration in its list"),
    "fuse": (64, "one more model and its optimiser state in the same trial's worker, and "
             "one more configuration in its list"),
}  # fmt: skip
_REFERENCE_BYTES = 8  # a list's slot: the least one more item of any list can take


def _check_counts(args: argparse.Namespace) -> None:
    for flag, (bound, each) in COUNT_BOUNDS.items():
        non_negative = flag in ("epochs", "max_failures", "fuse")
        name = f"--{flag.replace('_', '-')}"
        check_count(name, getattr(args, flag), bound, each, non_negative=non_negative)
    if not 0 <= args.seed < SEED_LIMIT:
        raise SearchError(
            f"--seed: got {args.seed}, expected an integer from 0 to {SEED_LIMIT - 1}"
        )
    if args.seed + args.seeds_per_config > SEED_LIMIT:
        raise SearchError(
            f"--seeds-per-config: got {args.seeds_per_config} with --seed {args.seed}, "
            f"expected the seeds it trains at (--seed, --seed + 1, ...) below {SEED_LIMIT}"
        )


def check_amounts(args: argparse.Namespace) -> None:
    """Durations and resources: finite, and positive where zero means nothing."""
    checks = (
        ("--time-budget", args.time_budget, "a number of seconds > 0", False),
        ("--tracking-wait", args.tracking_wait, "a number of seconds >= 0", True),
        ("--cpus-per-trial", args.cpus_per_trial, "a number of CPUs > 0", False),
        ("--gpus-per-trial", args.gpus_per_trial, "a number of GPUs >= 0", True),
        ("--min-free-disk", args.min_free_disk, "a number of MB >= 0", True),
    )
    for flag, value, expected, zero_ok in checks:
        if value is None:
            continue
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
            raise SearchError(f"{flag}: got {value:g}, expected {expected}")


def check_count(
    flag: str, value: int | None, bound: int, each: str, *, non_negative: bool = False
) -> None:
    """``value`` (None: not given) a count from 1 (0 with ``non_negative``) to ``bound``;
    past it, the message says what each unit holds and the memory the count's list of
    references alone would take."""
    if value is None:
        return
    if value < (0 if non_negative else 1):
        raise SearchError(
            f"{flag}: got {value}, expected a "
            f"{'non-negative' if non_negative else 'positive'} integer"
        )
    if value > bound:
        floor = value * _REFERENCE_BYTES
        raise SearchError(
            f"{flag}: got {value:,}, expected at most {bound:,}: each is {each}, so "
            f"{value:,} would take more than {_bytes(floor)} for their references alone"
        )


def _bytes(count: int) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} bytes"


def check_experiment_name(name: str, flag: str = "--experiment") -> str:
    """An experiment is a name, not a path: it names a directory, a database and a record
    under the runs directory, so letters, digits, '.', '_' and '-' only, not starting
    with a dot (no '..', no '/')."""
    if not EXPERIMENT_NAME.fullmatch(name):
        raise SearchError(
            f"{flag} {shorten(name)}: expected a name of letters, digits, '.', '_' "
            "and '-' (at most 128, not starting with '.' or '-'): it names files under "
            "--runs-dir, so it cannot be a path"
        )
    return name


def check_tracking_uri(uri: str) -> str:
    """A tracking URI MLflow can use: a known scheme, and for sqlite a database whose
    directory exists (MLflow would create it silently, anywhere)."""
    scheme = uri.split(":", 1)[0] if ":" in uri else ""
    if scheme not in TRACKING_SCHEMES:
        raise SearchError(
            f"--tracking-uri {shorten(uri)}: expected a URI of scheme "
            f"{', '.join(TRACKING_SCHEMES)} (e.g. sqlite:////abs/path/mlflow.db or "
            "http://host:5000)"
        )
    if scheme == "sqlite":
        path = sqlite_file(uri)
        if path is None or not path.is_absolute():
            raise SearchError(
                f"--tracking-uri {shorten(uri)}: expected sqlite:////absolute/path/mlflow.db "
                "(an absolute path, after three slashes: trials run in other directories)"
            )
        if not path.parent.is_dir():
            raise SearchError(
                f"--tracking-uri {shorten(uri)}: the directory {path.parent} does not exist"
            )
    return uri


def shorten(value: object, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters: messages never echo a whole value."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 15]}... ({len(text)} chars)"
