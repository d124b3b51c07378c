"""``python -m analysis.compare RUN_A RUN_B``: is one trial's ensemble significantly
better than another's? Paired tests on the same items, as the paper reports significance.

    python -m analysis.compare 3f2a91c0 7be00d12 --runs-dir runs
    python -m analysis.compare trial-3f2a91c0 <mlflow run id> --split val --csv diff.csv
    python -m analysis.compare family:word_bow family:char_rnn --experiment families

RUN_A and RUN_B are MLflow run ids, Tune trial ids (the ``tune.trial_id`` tag), run
names, or ``family:NAME``: the best finished trial of that encoder family in the search
(``trainables.presets.family_of``; best by dev R@10 mean, or ``--select semantic``).
Both ensembles are rebuilt from their ``ensemble.pt`` artifacts and evaluated on the
split (``test`` by default) of the search's data store (``--data`` overrides) and on its
semantic sets (``--senteval`` overrides):

- retrieval: per-query ranks, a paired bootstrap over images (10,000 resamples, seeded)
  for every metric, and McNemar's exact test on the R@K hits;
- semantic: per STS subtask, STS-B and SICK-R, Steiger's z (and Williams' t) for two
  dependent correlations with the same gold scores.

Every difference and statistic is signed as B - A (a positive z or t: B correlates
better); the output ends with one verdict line per family, e.g. ``retrieval: B better on
4 of 6 R@K (p<0.05 on 2)``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import pandas as pd
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from analysis._cli import run_cli
from analysis._comparison import (
    ALPHA,
    FAMILY_REF,
    RECALLS,
    SPLITS,
    Comparison,
    best_of_family,
    compare_retrieval,
    compare_runs,
    compare_semantic,
    format_comparison,
    verdict,
)
from analysis._data import (
    AnalysisError,
    find_run,
    latest_experiment,
    open_client,
    print_out,
    progress_printer,
    tracking_uri_for,
)
from storage import write_text_atomic
from storage.cli import OneLineParser
from trainables import names
from trainables.config import DEVICE_FORMS, ConfigError, check_device

__all__ = [
    "ALPHA",
    "FAMILY_REF",
    "RECALLS",
    "SELECT",
    "SPLITS",
    "Comparison",
    "best_of_family",
    "compare_retrieval",
    "compare_runs",
    "compare_semantic",
    "find_run",
    "format_comparison",
    "main",
    "verdict",
]


logger = logging.getLogger(__name__)
SELECT = {"retrieval": names.BEST_RETRIEVAL, "semantic": names.BEST_SEMANTIC}  # dev only
MAX_RESAMPLES = 1_000_000  # every difference is kept in memory: 11 metrics x 8 bytes each
SEED_LIMIT = 2**63


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m analysis.compare",
        description="Test whether two trials' snapshot ensembles differ significantly.",
        epilog="Exit status: 0 compared, 2 bad input (one 'error:' line naming it).",
    )
    run_help = (
        f"run id, trial id or run name; or {FAMILY_REF}NAME, the best finished trial of "
        "that encoder family (e.g. family:word_bow) in --experiment (default: the "
        "latest search), chosen by --select"
    )
    parser.add_argument("run_a", metavar="RUN_A", help=run_help)
    parser.add_argument("run_b", metavar="RUN_B", help=run_help)
    parser.add_argument(
        "--runs-dir",
        type=Path,
        default=Path("runs"),
        help="the search's --runs-dir (default: %(default)s)",
    )
    parser.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow tracking URI (default: sqlite:///RUNS_DIR/mlflow.db)",
    )
    parser.add_argument(
        "--experiment",
        default=None,
        help="look the runs up in this experiment only (default: every experiment; for "
        f"{FAMILY_REF}NAME the latest search in --runs-dir)",
    )
    parser.add_argument(
        "--select",
        choices=tuple(SELECT),
        default="retrieval",
        help=f"what picks a {FAMILY_REF}NAME's best trial: its best dev R@10 mean (the "
        "paper's selection) or its best dev semantic score (choices: %(choices)s; default: "
        "%(default)s)",
    )
    parser.add_argument(
        "--data", default=None, help="feature store (default: the store RUN_A's search used)"
    )
    parser.add_argument(
        "--senteval",
        default=None,
        help="semantic sets (default: those RUN_A's search used; --no-semantic for none)",
    )
    parser.add_argument(
        "--split",
        choices=tuple(SPLITS),
        default="test",
        help="store split, dev = val (choices: %(choices)s; default: %(default)s)",
    )
    parser.add_argument(
        "--resamples",
        type=int,
        default=10_000,
        help=f"bootstrap resamples, 1 to {MAX_RESAMPLES} (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="bootstrap seed, 0 to 2**63 - 1 (default: %(default)s)"
    )
    parser.add_argument("--device", default="auto", help=f"{DEVICE_FORMS} (default: %(default)s)")
    parser.add_argument("--no-semantic", action="store_true", help="retrieval only")
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="skip checking the split's shards against the store manifest's sha256",
    )
    parser.add_argument(
        "--csv",
        type=Path,
        default=None,
        help="also write the rows as CSV (its folder must exist; default: none)",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress lines on stderr (shown only when it is a terminal; the result "
        "on stdout and errors stay)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    def body() -> int:
        try:
            _check_options(args)
            comparison = _run(args)
            if args.csv:
                frames = {"retrieval": comparison.retrieval, "semantic": comparison.semantic}
                rows = pd.concat([f.assign(kind=k) for k, f in frames.items() if not f.empty])
                write_text_atomic(args.csv, rows.to_csv(index=False))
        except OSError as err:  # only the CSV is written
            raise AnalysisError(
                f"--csv {args.csv}: cannot be written ({err.strerror or err})"
            ) from None
        return print_out(comparison.text())

    return run_cli(body, "interrupted: nothing was compared or written")


def _check_options(args: argparse.Namespace) -> None:
    """The options that need no tracking store, checked before anything is read."""
    if not 1 <= args.resamples <= MAX_RESAMPLES:
        raise AnalysisError(
            f"--resamples: got {args.resamples}, expected an integer from 1 to {MAX_RESAMPLES}"
        )
    if not 0 <= args.seed < SEED_LIMIT:
        raise AnalysisError(f"--seed: got {args.seed}, expected an integer from 0 to 2**63 - 1")
    try:
        check_device(args.device)
    except ConfigError as err:
        raise AnalysisError(f"--device: {err.detail}") from None
    if args.csv is not None:
        csv, folder = args.csv, args.csv.parent
        if csv.is_dir() or not str(csv).strip():
            raise AnalysisError(f"--csv {csv}: is a directory; expected a file name")
        if not folder.is_dir():
            raise AnalysisError(f"--csv {csv}: the folder {folder} does not exist")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise AnalysisError(f"--csv {csv}: the folder {folder} is not writable")


def _run(args: argparse.Namespace) -> Comparison:
    uri = tracking_uri_for(args.tracking_uri, args.runs_dir)
    client = open_client(uri)
    say = progress_printer("compare", args.quiet)
    say(f"looking up {args.run_a} and {args.run_b} in {uri}")
    run_a, run_b = (
        _resolve(client, ref, args.experiment, args.runs_dir, args.select)
        for ref in (args.run_a, args.run_b)
    )
    return compare_runs(
        client,
        run_a,
        run_b,
        data=args.data,
        senteval="" if args.no_semantic else args.senteval,
        split=args.split,
        resamples=args.resamples,
        seed=args.seed,
        device=args.device,
        verify=not args.no_verify,
        progress=say,
    )


def _resolve(
    client: MlflowClient, ref: str, experiment: str | None, runs_dir: Path, select: str
) -> Run:
    """``family:NAME``: that family's best finished trial in ``experiment`` (default: the
    latest search in ``runs_dir``) by the dev metric ``select``; else :func:`find_run`."""
    if not ref.startswith(FAMILY_REF):
        return find_run(client, ref, experiment)
    if experiment is None:
        experiment, _ = latest_experiment(runs_dir)
    return best_of_family(client, experiment, ref.removeprefix(FAMILY_REF), SELECT[select])


if __name__ == "__main__":
    sys.exit(main())
