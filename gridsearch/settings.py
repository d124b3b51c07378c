"""The search's command line and the validated settings it becomes."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainables import names

# --objective -> (metric(s), mode(s)): the best dev value over the epochs. Only dev values
# may be selected on (names.selectable refuses test and ensemble ones).
_RETRIEVAL, _SEMANTIC = (names.selectable(m) for m in (names.BEST_RETRIEVAL, names.BEST_SEMANTIC))
OBJECTIVES = {
    "retrieval": (_RETRIEVAL, "max"),
    "semantic": (_SEMANTIC, "max"),
    "both": ([_RETRIEVAL, _SEMANTIC], ["max", "max"]),
}
# Model settings for a machine without a GPU, so that the default search finishes in
# minutes on 2 cores (the paper's n=1024 takes hours there). --full-size keeps the paper's.
# The learning-rate cycle shrinks with the epochs (the paper: 32 epochs, 4-epoch cycles), so
# that every epoch ends at the cycle's minimum with a snapshot, and ASHA, which compares
# trials at cycle ends, can stop trials after the first epoch.
SHORT_CYCLES = {"cycle_epochs": 1, "snapshot_interval": 1}
CPU_SIZED = {"hidden_size": 32, "batch_size": 64, "epochs": 2, **SHORT_CYCLES}
SMOKE = {"hidden_size": 8, "batch_size": 8, "epochs": 2, **SHORT_CYCLES}
SMOKE_WORLD_IMAGES = 120


class SearchError(Exception):
    """Bad input or an unusable environment, reported without a traceback."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m gridsearch.run",
        description="Hyperparameter search with Ray Tune + Optuna, tracked in MLflow.",
    )
    what = p.add_argument_group("what to search")
    what.add_argument("--space", default=None, help="a named space (--list-spaces)")
    what.add_argument("--space-file", type=Path, default=None, help="a YAML/TOML space file")
    what.add_argument("--list-spaces", action="store_true", help="list the named spaces")
    what.add_argument(
        "--objective",
        choices=tuple(OBJECTIVES),
        default="retrieval",
        help="dev R@10 mean, dev semantic score, or both (a Pareto front)",
    )
    what.add_argument(
        "--scheduler",
        choices=("asha", "fifo"),
        default=None,
        help="ASHA early stopping or none (default: asha, fifo for 'both')",
    )
    what.add_argument(
        "--num-samples",
        type=int,
        default=None,
        help="trials (default: the grid size for grid spaces, else 8; 4 on CPU)",
    )
    what.add_argument("--epochs", type=int, default=None, help="epochs per trial")
    what.add_argument(
        "--max-concurrent",
        type=int,
        default=None,
        help="trials at once (default: what the resources allow)",
    )
    what.add_argument("--time-budget", type=float, default=None, help="stop after this many s")
    what.add_argument("--seed", type=int, default=0, help="sampler and training seed")
    what.add_argument(
        "--full-size", action="store_true", help="keep the paper's model size even without a GPU"
    )
    what.add_argument("--smoke-test", action="store_true", help="the same path, tiny, for CI")
    data = p.add_argument_group("data")
    data.add_argument("--data", default=None, help="feature store (default: the embedded world)")
    data.add_argument("--senteval", default=None, help="SentEval data/downstream directory")
    data.add_argument(
        "--no-verify",
        action="store_true",
        help="skip checking every shard against the store manifest's sha256 while reading "
        "(saves about a third of the read; a corrupt shard then trains silently)",
    )
    data.add_argument(
        "--data-via",
        choices=("object-store", "uri"),
        default="object-store",
        help="object-store: the driver reads the store and Ray ships it once per node; "
        "uri: every trial reads --data itself (it must be a path or URI every node can "
        "read: NFS, s3://, gs://)",
    )
    res = p.add_argument_group("resources")
    res.add_argument("--cpus-per-trial", type=float, default=None)
    res.add_argument(
        "--gpus-per-trial",
        type=float,
        default=None,
        help="a fraction packs trials on a GPU (each capped to its share)",
    )
    res.add_argument("--address", default=None, help="join a Ray cluster: auto, ray://host:port")
    res.add_argument("--no-dashboard", action="store_true", help="start the local Ray without it")
    res.add_argument(
        "--dashboard-host",
        default="127.0.0.1",
        help="where the local Ray's dashboard listens (default: this machine only; "
        "0.0.0.0 opens it to the network)",
    )
    out = p.add_argument_group("where results go")
    out.add_argument(
        "--runs-dir",
        type=Path,
        default=Path("runs"),
        help="local home of the defaults below and the cached embedded world",
    )
    out.add_argument(
        "--storage-path",
        default=None,
        help="Tune experiments (local path or URI; default RUNS_DIR/tune)",
    )
    out.add_argument(
        "--experiment",
        default=None,
        help="names the Tune and MLflow experiments (default: SPACE-TIMESTAMP)",
    )
    out.add_argument("--resume", action="store_true", help="continue an interrupted search")
    out.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow tracking URI (default: sqlite:///RUNS_DIR/mlflow.db)",
    )
    out.add_argument(
        "--optuna-storage",
        default=None,
        help="Optuna study database URL (default: an sqlite file beside the experiment)",
    )
    out.add_argument("--max-failures", type=int, default=2, help="retries of a failing trial")
    out.add_argument(
        "--tracking-wait",
        type=float,
        default=300.0,
        help="seconds the search waits at its end for an MLflow server that went away "
        "(training never waits; --resume records what is still missing)",
    )
    return p.parse_args(argv)


@dataclass(frozen=True)
class SearchSettings:
    args: argparse.Namespace
    space_name: str
    experiment: str
    runs_dir: Path
    storage_path: str
    tracking_uri: str
    metric: Any
    mode: Any
    scheduler: str

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SearchSettings:
        if args.resume:
            args = _restore_args(args)
        if args.space and args.space_file:
            raise SearchError("give --space or --space-file, not both")
        if args.resume and not args.experiment:
            raise SearchError("--resume needs --experiment NAME (the search to continue)")
        if not (args.space or args.space_file):
            raise SearchError("give --space NAME (see --list-spaces) or --space-file FILE")
        if args.tracking_wait < 0:
            raise SearchError(f"--tracking-wait: got {args.tracking_wait}, expected >= 0 s")
        if args.data_via == "uri" and not args.data:
            raise SearchError("--data-via uri needs --data (a store every node can read)")
        for flag in ("num_samples", "epochs", "max_concurrent", "max_failures"):
            value = getattr(args, flag)
            if value is not None and value < (0 if flag in ("epochs", "max_failures") else 1):
                raise SearchError(
                    f"--{flag.replace('_', '-')}: got {value}, expected a "
                    f"{'non-negative' if flag in ('epochs', 'max_failures') else 'positive'}"
                    " integer"
                )
        objective = args.objective
        scheduler = args.scheduler or ("fifo" if objective == "both" else "asha")
        if scheduler == "asha" and objective == "both":
            raise SearchError(
                "--scheduler asha needs a single objective; use --scheduler fifo "
                "with --objective both"
            )
        runs_dir = args.runs_dir.resolve()
        space_name = args.space or args.space_file.stem
        experiment = args.experiment or f"{space_name}-{time.strftime('%Y%m%d-%H%M%S')}"
        metric, mode = OBJECTIVES[objective]
        return cls(
            args,
            space_name,
            experiment,
            runs_dir,
            args.storage_path or str(runs_dir / "tune"),
            args.tracking_uri or f"sqlite:///{runs_dir / 'mlflow.db'}",
            metric,
            mode,
            scheduler,
        )


# What a --resume takes from its own command line; everything else comes from the
# search's record, so the continued search runs exactly as it started.
_RESUME_KEEPS = (
    "resume",
    "experiment",
    "runs_dir",
    "address",
    "no_dashboard",
    "dashboard_host",
    "tracking_wait",
    "list_spaces",
)


def record_path(runs_dir: Path, experiment: str) -> Path:
    return runs_dir.resolve() / "searches" / f"{experiment}.json"


def save_record(args: argparse.Namespace, experiment: str) -> None:
    """Write the search's settings, for --resume."""
    path = record_path(args.runs_dir, experiment)
    path.parent.mkdir(parents=True, exist_ok=True)
    values = {k: str(v.resolve()) if isinstance(v, Path) else v for k, v in vars(args).items()}
    path.write_text(json.dumps({"args": {**values, "experiment": experiment}}, indent=2))


def _restore_args(args: argparse.Namespace) -> argparse.Namespace:
    path = record_path(args.runs_dir, args.experiment)
    if not path.exists():
        raise SearchError(
            f"--resume: no search named {args.experiment!r} under --runs-dir "
            f"{args.runs_dir} (expected its record {path})"
        )
    saved = json.loads(path.read_text())["args"]
    defaults = vars(parse_args([]))  # options added since the record was written
    merged = {**defaults, **saved, **{k: getattr(args, k) for k in _RESUME_KEEPS}}
    for key in ("space_file", "runs_dir"):
        if merged.get(key) is not None:
            merged[key] = Path(merged[key])
    return argparse.Namespace(**merged)
