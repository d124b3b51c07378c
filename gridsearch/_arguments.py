"""The search's command line: ``python -m gridsearch.run --help``. Parsing only; what
the options become is ``settings.SearchSettings.from_argv``. Every option's help says
what it is and, for an option that takes a value, its default, once."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from gridsearch._sampler import MODELS
from gridsearch._scheduler_choice import FIFO_BELOW_EPOCHS, SCHEDULERS
from gridsearch.spaces import SPACES
from storage.cli import OneLineParser
from trainables.config import ENGINES, RECURRENCES

__all__ = ["OBJECTIVE_CHOICES", "build_parser", "given_flags"]

OBJECTIVE_CHOICES = ("retrieval", "semantic", "both")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m gridsearch.run",
        description="Hyperparameter search with Ray Tune + Optuna, tracked in MLflow.",
    )
    for group in (_what_to_search, _data, _resources, _where_results_go, _output):
        group(p)
    return p


def given_flags(argv: Sequence[str] | None) -> frozenset[str]:
    """The destinations of the flags ``argv`` gives (with any value, the default's
    included): ``argv`` parsed again by a parser whose every default is left out."""
    probe = build_parser()
    for action in probe._actions:  # argparse's own way to leave a default out
        action.default = argparse.SUPPRESS
    return frozenset(vars(probe.parse_args(argv)))


def _output(p: argparse.ArgumentParser) -> None:
    out = p.add_argument_group("output")
    out.add_argument(
        "--quiet",
        action="store_true",
        help="for scripts: print only errors and the final summary (no progress lines, no "
        "library warnings, no closing commands); the exit status as without it",
    )


def _what_to_search(p: argparse.ArgumentParser) -> None:
    what = p.add_argument_group("what to search")
    what.add_argument(
        "--space",
        metavar="NAME",
        default=None,
        help=f"a named space: {', '.join(SPACES)}; --list-spaces says what each searches "
        "(no default: give --space or --space-file)",
    )
    what.add_argument(
        "--space-file",
        type=Path,
        metavar="FILE",
        default=None,
        help="a YAML/TOML space file (no default: give --space or --space-file)",
    )
    what.add_argument("--list-spaces", action="store_true", help="list the named spaces")
    what.add_argument(
        "--objective",
        choices=OBJECTIVE_CHOICES,
        default="retrieval",
        help="dev R@10 mean, dev semantic score, or both (a Pareto front) (default: retrieval)",
    )
    what.add_argument(
        "--scheduler",
        choices=SCHEDULERS,
        default="auto",
        help="ASHA early stopping (for 'both': by Pareto rank) or none; auto: ASHA for "
        f"'both', and for one objective from {FIFO_BELOW_EPOCHS} epochs per trial, FIFO "
        "below (what the recorded benchmark measured best) (default: auto)",
    )
    what.add_argument(
        "--num-samples",
        type=int,
        metavar="N",
        default=None,
        help="trials; with --resume, a larger N extends the search (default: the grid's "
        "size for grid spaces, else 8 with a GPU, 4 without, 2 in --smoke-test; with "
        "--resume, the search's)",
    )
    what.add_argument(
        "--epochs",
        type=int,
        metavar="N",
        default=None,
        help="epochs per trial (default: 32, the paper's; 4 without a GPU unless "
        "--full-size; 2 in --smoke-test)",
    )
    what.add_argument(
        "--max-concurrent",
        type=int,
        metavar="N",
        default=None,
        help="trials at once (default: what the resources allow)",
    )
    what.add_argument(
        "--time-budget",
        type=float,
        metavar="S",
        default=None,
        help="stop the search after this many seconds, resumably (default: no limit)",
    )
    what.add_argument(
        "--seed", type=int, metavar="N", default=0, help="sampler and training seed (default: 0)"
    )
    what.add_argument(
        "--sampler",
        choices=MODELS,
        default="tpe",
        help="what draws the trials after the space-filling starts, for spaces without a "
        "grid: Optuna's TPE, or its Gaussian-process sampler (gp; measured better on the "
        "recorded lr_batch problem, slower to draw as trials accumulate) (default: tpe)",
    )
    what.add_argument(
        "--seeds-per-config",
        type=int,
        metavar="K",
        default=1,
        help="train each configuration at K seeds (--seed, --seed + 1, ...) and select on "
        "their mean; reports also their spread; on a GPU the K seeds train as one fused "
        "model where the configuration allows (--engine), else one after the other, K "
        "times the training (default: 1)",
    )
    what.add_argument(
        "--fuse",
        type=int,
        metavar="K",
        default=0,
        help="train up to K concurrent configurations of the same shape (hidden size, RNN "
        "type, pooling, batch size...; they may differ in margin, learning rates, seed...) "
        "as one fused model in one Tune trial; each stays its own Optuna trial and MLflow "
        "run and is stopped early on its own; pays on a GPU, where one small model leaves "
        "the chip idle; slower on a CPU; 0 or 1: off (default: 0)",
    )
    what.add_argument(
        "--engine",
        choices=ENGINES,
        default="auto",
        help="how a trial's models (its configurations at their seeds) train: fused as one "
        "model, sequential one after the other, or auto: fused where it pays (two or more "
        "on a GPU, or several configurations of a --fuse trial); the same metrics either "
        "way; recorded with every trial (default: auto)",
    )
    what.add_argument(
        "--recurrence",
        choices=RECURRENCES,
        default="compiled",
        help="the CPU training recurrence's per-step loop: compiled (C++, built by this "
        "driver before any trial starts, once per machine and environment) or python "
        "(nothing compiled: a machine without a C++ compiler); the same equations either "
        "way; recorded with every trial (default: compiled)",
    )
    what.add_argument(
        "--full-size", action="store_true", help="keep the paper's model size even without a GPU"
    )
    what.add_argument(
        "--smoke-test",
        action="store_true",
        help="the same path, tiny, for CI: the 120-image world, n = 8 (sizes a space or preset "
        "sets divided by 64, at least 8: its sizes stay apart), batch 8 unless the space sets "
        "one, 2 epochs, 2 trials "
        "(a grid keeps its first 2 points; --num-samples N keeps its first N), no baselines",
    )


def _data(p: argparse.ArgumentParser) -> None:
    data = p.add_argument_group("data")
    data.add_argument(
        "--data",
        metavar="STORE",
        default=None,
        help="feature store, a path or URI (default: the embedded world, built once in "
        "RUNS_DIR/world)",
    )
    data.add_argument(
        "--senteval",
        metavar="DIR",
        default=None,
        help="SentEval data/downstream directory (default: the store's own semantic sets)",
    )
    data.add_argument(
        "--no-verify",
        action="store_true",
        help="skip checking every shard against the store manifest's sha256 while reading "
        "(saves about a third of the read; a corrupt shard then trains silently)",
    )
    data.add_argument(
        "--baselines",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="compare with the store's char n-gram baselines, computed once per store "
        "beside the first trials (about a minute of CPU for the embedded world) and cached in "
        "STORE/baselines.json, in the summary and the report; on unless --smoke-test",
    )
    data.add_argument(
        "--data-via",
        choices=("object-store", "uri"),
        default="object-store",
        help="object-store: the driver reads the store and Ray ships it once per node; "
        "uri: every trial reads --data itself (it must be a path or URI every node can "
        "read: NFS, s3://, gs://) (default: object-store)",
    )


def _resources(p: argparse.ArgumentParser) -> None:
    res = p.add_argument_group("resources")
    res.add_argument(
        "--cpus-per-trial",
        type=float,
        metavar="N",
        default=None,
        help="CPUs each trial holds, also its torch threads (default: 1 without GPUs; with "
        "GPUs, the cluster's CPUs shared among the trials its GPUs hold)",
    )
    res.add_argument(
        "--gpus-per-trial",
        type=float,
        metavar="N",
        default=None,
        help="GPUs each trial holds; a fraction packs trials on a GPU, each capped to its "
        "share of the memory (default: 1 when the cluster has a GPU, else 0)",
    )
    res.add_argument(
        "--address",
        metavar="ADDRESS",
        default=None,
        help="join a running Ray cluster: auto (the one `ray start` made on this machine), "
        "HOST:PORT (its head, e.g. HEAD:6379) or ray://HOST:PORT (Ray Client) "
        "(default: start a local Ray for this search)",
    )
    res.add_argument("--no-dashboard", action="store_true", help="start the local Ray without it")
    res.add_argument(
        "--dashboard-host",
        metavar="HOST",
        default="127.0.0.1",
        help="where the local Ray's dashboard listens; 0.0.0.0 opens it to the network "
        "(default: 127.0.0.1, this machine only)",
    )


def _where_results_go(p: argparse.ArgumentParser) -> None:
    out = p.add_argument_group("where results go")
    out.add_argument(
        "--runs-dir",
        type=Path,
        metavar="DIR",
        default=Path("runs"),
        help="local home of the defaults below and the cached embedded world (default: runs)",
    )
    out.add_argument(
        "--storage-path",
        metavar="PATH",
        default=None,
        help="Tune experiments, a local path or URI (default: RUNS_DIR/tune)",
    )
    out.add_argument(
        "--experiment",
        metavar="NAME",
        default=None,
        help="names the Tune and MLflow experiments and the Optuna study "
        "(default: SPACE-YYYYmmdd-HHMMSS-XXXXXX, X a random hex digit)",
    )
    out.add_argument(
        "--resume",
        action="store_true",
        help="continue the search --experiment NAME with the settings it started with, or "
        "extend it with a larger --num-samples",
    )
    out.add_argument(
        "--warm-start",
        metavar="NAME",
        default=None,
        help="start the Optuna study from the ended trials of the earlier search NAME in "
        "the same runs directory (for example on a smaller world): the sampler starts "
        "from their results; their configs are trained again here (default: none)",
    )
    out.add_argument(
        "--tracking-uri",
        metavar="URI",
        default=None,
        help="MLflow tracking URI (default: sqlite:///RUNS_DIR/mlflow.db)",
    )
    out.add_argument(
        "--optuna-storage",
        metavar="URL",
        default=None,
        help="Optuna study database URL (default: sqlite:///STORAGE_PATH/NAME.optuna.db "
        "beside the Tune experiment, or under RUNS_DIR/optuna when that is a URI)",
    )
    out.add_argument(
        "--max-failures",
        type=int,
        metavar="N",
        default=2,
        help="retries of a failing trial, each from its last checkpoint (default: 2)",
    )
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
        metavar="S",
        default=300.0,
        help="seconds the search waits at its end for an MLflow server that went away; "
        "training never waits, --resume records what is still missing (default: 300)",
    )
