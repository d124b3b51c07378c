"""What a search was asked to do, as fields: ``RecordedSettings``, typed and frozen, which
is also the search's record on disk (``to_record``, ``from_record``, ``save_record``;
``RunsLayout.record``), and the objectives a search may select on.

Below the command line: ``gridsearch.settings.SearchSettings`` reads these settings from
one (a new search's flags, or a ``--resume``'s record through ``gridsearch._resumed``);
the modules that take settings without reading a command line (the resume, the spaces)
import this one, so no import, not even a type's, runs back up to the parser."""

from __future__ import annotations

import argparse
import dataclasses
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from gridsearch._flags import check_args
from gridsearch._layout import RunsLayout
from gridsearch._record import STARTED, write_record
from trainables import names

__all__ = [
    "DEFAULT_MIN_FREE_DISK_MB",
    "OBJECTIVES",
    "RecordedSettings",
    "default_experiment",
    "first_objective",
]

# --objective -> (metric(s), mode(s)): the best dev value over the epochs. Only dev values
# may be selected on (names.selectable refuses test and ensemble ones).
_RETRIEVAL, _SEMANTIC = (names.selectable(m) for m in (names.BEST_RETRIEVAL, names.BEST_SEMANTIC))
OBJECTIVES: dict[str, tuple[Any, Any]] = {
    "retrieval": (_RETRIEVAL, "max"),
    "semantic": (_SEMANTIC, "max"),
    "both": ([_RETRIEVAL, _SEMANTIC], ["max", "max"]),
}


def first_objective(objective: str) -> tuple[str, str]:
    """The metric and mode of ``--objective``'s first metric (for ``both``, retrieval's:
    the paper's selection): what Tune itself is told (the searcher handles both of
    ``both``; a fused trial reports its best member on it)."""
    metric, mode = OBJECTIVES[objective]
    return (metric[0], mode[0]) if isinstance(metric, list) else (metric, mode)


DEFAULT_MIN_FREE_DISK_MB = 256.0


def default_experiment(space: str) -> str:
    """A new search's name when ``--experiment`` gives none: the space, when it started
    and 6 random hex digits, so that two searches started in the same second (a script
    launching several) are two experiments (one in 16.8 million pairs would not be)."""
    return f"{space}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class RecordedSettings:
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
    min_free_disk_mb: float = DEFAULT_MIN_FREE_DISK_MB  # stop (resumably) below this free disk
    baselines: bool = True  # compare with the store's char n-gram baselines (cached)
    warm_start: str | None = None  # an earlier search whose trials start the study
    seeds_per_config: int = 1  # each trial trains at this many seeds, reports their mean
    fuse: int = 0  # up to this many configurations of one shape per fused trial (0, 1: off)
    engine: str = "auto"  # how a trial's models train (trainables.config.RunConfig.engine)
    recurrence: str = "compiled"  # the CPU recurrence's loop (RunConfig.recurrence)
    sampler: str = "tpe"  # after the space-filling starts: "tpe" or "gp" (_sampler.MODELS)
    # a --resume of a runs directory copied or moved since the search started: where it
    # was (its record's paths under it now name the same files under layout.root); not
    # recorded (the record is rewritten with the new paths)
    moved_from: Path | None = None

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
        """The command that continues this search, on the cluster it ran on."""
        joined = f" --address {self.address}" if self.address else ""
        return (
            f"python -m gridsearch.run --experiment {self.experiment} --resume "
            f"--runs-dir {self.layout.root}{joined}"
        )

    @classmethod
    def started(cls, args: argparse.Namespace) -> Self:
        """The settings of a new search (not a ``--resume``) from its parsed command
        line; bad input raises ``SearchError`` naming the flag."""
        check_args(args)
        layout = RunsLayout.at(args.runs_dir)
        space_name = args.space or args.space_file.stem
        experiment = args.experiment or default_experiment(space_name)
        storage_path = args.storage_path or str(layout.tune)
        return cls(
            space=args.space,
            space_file=args.space_file.resolve() if args.space_file else None,
            objective=args.objective,
            scheduler=args.scheduler,
            seeds_per_config=args.seeds_per_config,
            fuse=args.fuse,
            engine=args.engine,
            recurrence=args.recurrence,
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
    def from_record(cls, record: Mapping[str, Any]) -> Self:
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
