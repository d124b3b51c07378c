"""What a search was asked to do: ``SearchSettings``, typed, frozen and validated once from
the command line (``from_argv``). Its ``asdict`` is the search's record on disk
(``RunsLayout.record``), from which ``--resume`` rebuilds it exactly."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from gridsearch._arguments import build_parser
from gridsearch._layout import RunsLayout, rebase
from gridsearch._record import STARTED, write_record
from trainables import names
from trainables.config import CPU_SIZED, SMOKE

__all__ = [
    "CPU_SIZED",
    "OBJECTIVES",
    "SMOKE",
    "SMOKE_WORLD_IMAGES",
    "NothingToRun",
    "SearchError",
    "SearchSettings",
    "parse_args",
]

# --objective -> (metric(s), mode(s)): the best dev value over the epochs. Only dev values
# may be selected on (names.selectable refuses test and ensemble ones).
_RETRIEVAL, _SEMANTIC = (names.selectable(m) for m in (names.BEST_RETRIEVAL, names.BEST_SEMANTIC))
OBJECTIVES: dict[str, tuple[Any, Any]] = {
    "retrieval": (_RETRIEVAL, "max"),
    "semantic": (_SEMANTIC, "max"),
    "both": ([_RETRIEVAL, _SEMANTIC], ["max", "max"]),
}
SMOKE_WORLD_IMAGES = 120
# What a --resume takes from its own command line; everything else comes from the
# search's record, so the continued search runs exactly as it started. num_samples only
# grows: a larger --num-samples extends the search (the record keeps the new number).
RESUME_KEEPS = (
    "resume",
    "num_samples",
    "address",
    "dashboard",
    "dashboard_host",
    "tracking_wait_s",
    "min_free_disk_mb",
)
DEFAULT_MIN_FREE_DISK_MB = 256.0
# Where MLflow can keep a search: its local database, a tracking server, or a database URL.
TRACKING_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks")


class SearchError(Exception):
    """Bad input or an unusable environment, reported without a traceback."""


class NothingToRun(Exception):
    """A ``--resume`` of a search that ran every trial it was asked for (and no larger
    ``--num-samples``): not an error; the message says so in one line."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The raw command line (``--help``, ``--list-spaces``); ``SearchSettings.from_argv``
    validates it."""
    return build_parser().parse_args(argv)


@dataclass(frozen=True)
class SearchSettings:
    # -- what to search --
    space: str | None  # a named space (--space), or None with a space file
    space_file: Path | None  # a YAML/TOML space file (absolute)
    objective: str  # "retrieval", "semantic" or "both"
    scheduler: str  # "auto", "asha" (Pareto-rank halving for "both") or "fifo"; the
    # driver resolves "auto" once the epochs are known (_scheduler_choice.resolve_scheduler)
    num_samples: int | None  # trials; None = the space's grid size or a default (the
    # record holds the number the search resolved it to)
    epochs: int | None  # epochs per trial; None = the model size's default
    max_concurrent: int | None  # None = what the resources allow
    time_budget_s: float | None  # stop the search after this long
    seed: int  # the sampler's and every trial's training seed
    full_size: bool  # keep the paper's model size without a GPU
    smoke_test: bool  # the same path, tiny
    # -- data --
    data: str | None  # the store (absolute path or URI); None = the embedded world
    senteval: str | None  # SentEval data/downstream; None = the store's own sets
    data_via: str  # "object-store" (the driver reads and ships it) or "uri"
    verify: bool  # check every shard against the manifest's sha256
    # -- resources --
    cpus_per_trial: float | None
    gpus_per_trial: float | None
    address: str | None  # a Ray cluster to join; None = start a local one
    dashboard: bool  # start the local Ray's dashboard
    dashboard_host: str
    # -- where results go --
    layout: RunsLayout
    storage_path: str  # the Tune experiments' parent (a path or URI)
    experiment: str  # names the Tune and MLflow experiments and the Optuna study
    resume: bool
    tracking_uri: str
    optuna_storage: str  # the study's database URL
    max_failures: int  # retries of a failing trial
    tracking_wait_s: float  # how long the end waits for a tracking store that went away
    min_free_disk_mb: float = 256.0  # stop (resumably) below this much free local disk (MB)
    baselines: bool = True  # compare with the store's char n-gram baselines (cached)
    warm_start: str | None = None  # an earlier search whose trials start the study
    seeds_per_config: int = 1  # each trial trains at this many seeds, reports their mean
    sampler: str = "tpe"  # after the space-filling starts: "tpe" or "gp" (_sampler.MODELS)
    # a --resume of a runs directory copied or moved since the search started: where it
    # was (its record's paths under it now name the same files under layout.root); not
    # recorded (the record is rewritten with the new paths)
    moved_from: Path | None = None

    @property
    def space_name(self) -> str:
        if self.space:
            return self.space
        assert self.space_file is not None
        return self.space_file.stem

    @property
    def metric(self) -> str | list[str]:
        return OBJECTIVES[self.objective][0]

    @property
    def mode(self) -> str | list[str]:
        return OBJECTIVES[self.objective][1]

    @property
    def experiment_path(self) -> str:
        """The Tune experiment's directory (a path or URI)."""
        return f"{self.storage_path.rstrip('/')}/{self.experiment}"

    @property
    def resume_command(self) -> str:
        return (
            f"python -m gridsearch.run --experiment {self.experiment} --resume "
            f"--runs-dir {self.layout.root}"
        )

    @classmethod
    def from_argv(cls, argv: Sequence[str] | None) -> SearchSettings:
        """Validated settings from a command line; a ``--resume`` reads the rest from the
        search's record. Bad input raises ``SearchError`` naming the flag."""
        return cls.from_args(parse_args(argv))

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SearchSettings:
        if args.resume:
            return _resumed(args)
        _check(args)
        layout = RunsLayout.at(args.runs_dir)
        space_name = args.space or args.space_file.stem
        experiment = args.experiment or f"{space_name}-{time.strftime('%Y%m%d-%H%M%S')}"
        storage_path = args.storage_path or str(layout.tune)
        return cls(
            space=args.space,
            space_file=args.space_file.resolve() if args.space_file else None,
            objective=args.objective,
            scheduler=args.scheduler,
            seeds_per_config=args.seeds_per_config,
            sampler=args.sampler,
            num_samples=args.num_samples,
            epochs=args.epochs,
            max_concurrent=args.max_concurrent,
            time_budget_s=args.time_budget,
            seed=args.seed,
            full_size=args.full_size,
            smoke_test=args.smoke_test,
            data=_absolute(args.data),
            senteval=args.senteval,
            data_via=args.data_via,
            verify=not args.no_verify,
            cpus_per_trial=args.cpus_per_trial,
            gpus_per_trial=args.gpus_per_trial,
            address=args.address,
            dashboard=not args.no_dashboard,
            dashboard_host=args.dashboard_host,
            layout=layout,
            storage_path=storage_path,
            experiment=experiment,
            resume=False,
            tracking_uri=args.tracking_uri or layout.tracking_uri,
            optuna_storage=args.optuna_storage
            or f"sqlite:///{layout.optuna_db(experiment, storage_path)}",
            max_failures=args.max_failures,
            tracking_wait_s=args.tracking_wait,
            min_free_disk_mb=DEFAULT_MIN_FREE_DISK_MB
            if args.min_free_disk is None
            else args.min_free_disk,
            baselines=not args.smoke_test if args.baselines is None else args.baselines,
            warm_start=args.warm_start,
        )

    def to_record(self) -> dict[str, Any]:
        """``asdict(self)``, JSON-able: what ``--resume`` reads back."""
        record = json.loads(json.dumps(dataclasses.asdict(self), default=str))
        record.pop("moved_from")
        return dict(record)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> SearchSettings:
        values = dict(record)
        values.pop(STARTED, None)  # the record's start time (gridsearch._record)
        values.pop("moved_from", None)
        values["layout"] = RunsLayout(Path(values["layout"]["root"]))
        if values.get("space_file"):
            values["space_file"] = Path(values["space_file"])
        return cls(**values)

    def save_record(self, num_samples: int | None = None) -> Path:
        """Write the search's record (``num_samples``: the number of trials the search
        resolved, when the settings left it to the space or the hardware); a ``--resume``
        rewrites it keeping its start time."""
        path = self.layout.record(self.experiment)
        resolved = self.num_samples if num_samples is None else num_samples
        write_record(
            path, dataclasses.replace(self, resume=False, num_samples=resolved).to_record()
        )
        return path


def _absolute(data: str | None) -> str | None:
    """A store path made absolute (trials run in other directories, and on other nodes);
    a URI as it is."""
    return data if not data or "://" in data else str(Path(data).resolve())


EXPERIMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
SEED_LIMIT = 2**32  # Optuna's samplers and numpy's RandomState take seeds below 2**32


def _check(args: argparse.Namespace) -> None:
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
    _check_amounts(args)
    if args.tracking_uri is not None:
        check_tracking_uri(args.tracking_uri)


def _check_counts(args: argparse.Namespace) -> None:
    for flag in ("num_samples", "epochs", "max_concurrent", "max_failures", "seeds_per_config"):
        value = getattr(args, flag)
        non_negative = flag in ("epochs", "max_failures")
        if value is not None and value < (0 if non_negative else 1):
            raise SearchError(
                f"--{flag.replace('_', '-')}: got {value}, expected a "
                f"{'non-negative' if non_negative else 'positive'} integer"
            )
    if not 0 <= args.seed < SEED_LIMIT:
        raise SearchError(
            f"--seed: got {args.seed}, expected an integer from 0 to {SEED_LIMIT - 1}"
        )
    if args.seed + args.seeds_per_config > SEED_LIMIT:
        raise SearchError(
            f"--seeds-per-config: got {args.seeds_per_config} with --seed {args.seed}, "
            f"expected the seeds it trains at (--seed, --seed + 1, ...) below {SEED_LIMIT}"
        )


def _check_amounts(args: argparse.Namespace) -> None:
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
        path = Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None
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


def _from_saved(record: Any) -> SearchSettings:
    """Settings from a record: ``asdict(SearchSettings)``, or the parsed command line that
    searches started before the settings were typed wrote (``{"args": ...}``)."""
    if not isinstance(record, dict):
        raise TypeError(f"expected a JSON object, got {type(record).__name__}")
    if "args" not in record:
        return SearchSettings.from_record(record)
    saved = {**vars(parse_args([])), **record["args"]}
    saved.update(resume=False, runs_dir=Path(saved["runs_dir"]))
    if saved.get("space_file"):
        saved["space_file"] = Path(saved["space_file"])
    return SearchSettings.from_args(argparse.Namespace(**saved))


def _resumed(args: argparse.Namespace) -> SearchSettings:
    """The settings a search started with (its record), with what a ``--resume`` may
    change taken from this command line."""
    if not args.experiment:
        raise SearchError("--resume needs --experiment NAME (the search to continue)")
    if args.warm_start is not None:
        raise SearchError(
            "--warm-start applies when a search starts; a --resume continues its own study"
        )
    check_experiment_name(args.experiment)
    _check_amounts(args)
    layout = RunsLayout.at(args.runs_dir)
    path = layout.record(args.experiment)
    if not path.exists():
        raise SearchError(
            f"--resume: no search named {args.experiment!r} under --runs-dir "
            f"{args.runs_dir} (expected its record {path})"
        )
    try:
        settings = _from_saved(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, RecursionError) as err:
        reason = str(err).splitlines()[0][:200] if str(err) else ""
        raise SearchError(
            f"--resume: {path} is not a readable search record ({type(err).__name__}: "
            f"{reason}); it is written when a search starts (and when a --resume extends "
            "it), never by hand: start a new search, or restore the file"
        ) from None
    if settings.experiment != args.experiment:
        raise SearchError(
            f"--resume: {path} records the search {settings.experiment!r}, not "
            f"{args.experiment!r}; the file was moved or edited"
        )
    if settings.layout.root != layout.root:  # copied or moved since the search started
        settings = _moved(settings, layout)
    now = {
        "resume": True,
        "num_samples": _resumed_trials(args, settings),
        "address": args.address,
        "dashboard": not args.no_dashboard,
        "dashboard_host": args.dashboard_host,
        "tracking_wait_s": args.tracking_wait,
        "min_free_disk_mb": settings.min_free_disk_mb
        if args.min_free_disk is None
        else args.min_free_disk,
    }
    assert tuple(now) == RESUME_KEEPS
    return dataclasses.replace(settings, **now)


# the settings that name files; those under the recorded runs directory move with it
_PATHS = ("storage_path", "tracking_uri", "optuna_storage", "data", "senteval", "space_file")


def _moved(settings: SearchSettings, layout: RunsLayout) -> SearchSettings:
    """The settings of a search whose runs directory was at ``settings.layout.root``
    when it started and is at ``layout.root`` now (a copy, or moved): every path under
    the old place names the same file under the new one; paths given outside it (a
    --storage-path elsewhere, a tracking server) stay as they are. A local one that
    does not exist is refused, naming where the record came from."""
    old = settings.layout.root
    values: dict[str, Any] = {}
    for name in _PATHS:
        value = getattr(settings, name)
        if value is not None:
            moved = rebase(str(value), old, layout.root)
            values[name] = Path(moved) if isinstance(value, Path) else moved
    moved_settings = dataclasses.replace(settings, layout=layout, moved_from=old, **values)
    experiment = moved_settings.experiment_path
    local = unquote(urlparse(experiment).path) if experiment.startswith("file://") else experiment
    if "://" not in local and not Path(local).is_dir():
        raise SearchError(
            f"--resume: the search {settings.experiment!r} started in the runs directory "
            f"{old} (its record {layout.record(settings.experiment)} says so), which is now "
            f"--runs-dir {layout.root}; its Tune experiment {experiment} is not there: "
            "copy or move the whole runs directory (and a --storage-path outside it)"
        )
    return moved_settings


def _resumed_trials(args: argparse.Namespace, settings: SearchSettings) -> int | None:
    """The number of trials a ``--resume`` runs up to: the record's, or a larger
    ``--num-samples``, which extends the search (more trials of the same Optuna study)."""
    wanted, recorded = args.num_samples, settings.num_samples
    if wanted is None:
        return recorded
    if wanted < 1:
        raise SearchError(f"--num-samples: got {wanted}, expected a positive integer")
    if recorded is not None and wanted < recorded:
        raise SearchError(
            f"--num-samples {wanted}: the search {settings.experiment!r} was asked for "
            f"{recorded} trials, and a --resume cannot take any back; give {recorded} or "
            "more (more extends it), or leave --num-samples out"
        )
    if wanted != recorded and (args.address or "").startswith("ray://"):
        raise SearchError(
            f"--num-samples {wanted} with --address {args.address}: a search is extended "
            "by a driver on the cluster (--address auto or HOST:PORT), not through Ray Client"
        )
    return wanted
