"""The search's command line: ``python -m gridsearch.run --help``. Parsing only; what
the options become is ``settings.SearchSettings.from_argv``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

__all__ = ["OBJECTIVE_CHOICES", "build_parser"]

OBJECTIVE_CHOICES = ("retrieval", "semantic", "both")


class Parser(argparse.ArgumentParser):
    """argparse, but a bad command line is one ``error:`` line (exit 2), not a usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="python -m gridsearch.run",
        description="Hyperparameter search with Ray Tune + Optuna, tracked in MLflow.",
    )
    for group in (_what_to_search, _data, _resources, _where_results_go):
        group(p)
    return p


def _what_to_search(p: argparse.ArgumentParser) -> None:
    what = p.add_argument_group("what to search")
    what.add_argument("--space", default=None, help="a named space (--list-spaces)")
    what.add_argument("--space-file", type=Path, default=None, help="a YAML/TOML space file")
    what.add_argument("--list-spaces", action="store_true", help="list the named spaces")
    what.add_argument(
        "--objective",
        choices=OBJECTIVE_CHOICES,
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


def _data(p: argparse.ArgumentParser) -> None:
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


def _resources(p: argparse.ArgumentParser) -> None:
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


def _where_results_go(p: argparse.ArgumentParser) -> None:
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
        "--min-free-disk",
        type=float,
        default=None,
        metavar="MB",
        help="stop the search (resumably) when a local path it writes has less free space "
        "than this (default: 256; a --resume keeps the search's unless given)",
    )
    out.add_argument(
        "--tracking-wait",
        type=float,
        default=300.0,
        help="seconds the search waits at its end for an MLflow server that went away "
        "(training never waits; --resume records what is still missing)",
    )
