"""``python -m analysis.report``: the paper's views of a search, as one HTML page.

    python -m analysis.report --experiment margins --runs-dir runs --out reports/margins
    python -m analysis.report --runs-dir runs    # the search that started last there

Reads the search from MLflow (the parent run and one run per trial, see
``gridsearch.tracking``) and writes ``report.html`` (figures embedded, so the one file
opens anywhere), the figures as ``figures/*.png`` and the tables as ``tables/*.csv``:
trade-off curves, sensitivity of the final metrics to each searched parameter, Pareto
fronts, Optuna's hyperparameter importances, and the paper's Tables 2-3 and 5 for the
best trials. It then logs them to the search's parent run under ``report/``, so they
appear in ``mlflow ui``. Bad input (an unknown experiment, a search with no finished
trial) is reported as ``error: ...`` with exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from analysis import _sections
from analysis._cli import run_cli
from analysis._data import (
    OPTUNA_TABLES,
    AnalysisError,
    Progress,
    SearchRecord,
    check_sqlite_file,
    latest_experiment,
    load_search,
    open_client,
    print_out,
    progress_printer,
    silent,
    sqlite_path,
    tracking_uri_for,
)
from analysis._facts import facts, searched_text
from analysis._families import FamilyPair
from analysis._html import render_page
from analysis._importance import Importances, default_optuna_storage, param_importances
from gridsearch import RunsLayout
from storage.cli import OneLineParser, error_line

if TYPE_CHECKING:
    from analysis._comparison import Comparison

__all__ = [
    "ARTIFACT_PATH",
    "check_finished",
    "default_out",
    "latest_experiment",
    "log_report",
    "main",
    "searched_text",
    "write_report",
]


logger = logging.getLogger(__name__)
ARTIFACT_PATH = "report"
_PAGE = "report.html"
_FOLDERS = (("figures", "*.png"), ("tables", "*.csv"))


def write_report(
    record: SearchRecord,
    out: Path,
    optuna_storage: str | None = None,
    *,
    family_test: bool = True,
    progress: Progress = silent,
) -> Path:
    """Compute, draw and write the report of ``record`` into ``out``; returns the page.
    With trials of several encoder families and ``family_test``, the two leading
    families' best trials are tested against each other (``analysis.compare``, which
    rebuilds their ensembles on the search's store). Everything is written into a hidden
    folder inside ``out`` first and moved into place file by file at the end, so a
    failure leaves no half-written report behind."""
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".report-", suffix=".tmp", dir=out))
    except OSError as err:
        raise AnalysisError(f"--out {out}: cannot write there ({err.strerror or err})") from None
    try:
        _write_pages(record, staging, optuna_storage, family_test, progress)
        _publish(staging, out)
    except OSError as err:
        raise AnalysisError(
            f"--out {out}: writing the report failed ({error_line(err)}); the previous "
            "report there, if any, was left as it was"
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if created and not any(out.iterdir()):
            out.rmdir()
    return out / _PAGE


def _write_pages(
    record: SearchRecord,
    folder: Path,
    optuna_storage: str | None,
    family_test: bool,
    progress: Progress,
) -> None:
    target = _sections.Output(folder)
    test = _family_test(record, progress) if family_test else None
    progress(f"drawing the figures and tables of {len(record.trials)} trials")
    sections = [
        _sections.trials_section(record, target),
        _sections.families_section(record, target, test),
        _sections.tradeoff_section(record, target),
        _sections.sensitivity_section(record, target),
        _sections.pareto_section(record, target),
        _sections.importance_section(_importances(record, optuna_storage), target),
        _sections.paper_tables_section(record, target),
    ]
    shown = [s for s in sections if s is not None]
    page = render_page(f"Search {record.experiment}", facts(record), record.notes, shown)
    (folder / _PAGE).write_text(page, encoding="utf-8")


def _family_test(record: SearchRecord, progress: Progress) -> _sections.FamilyTest:
    """``analysis.compare`` between two families' best trials, on the search's store
    and semantic sets (torch is imported only when it runs)."""

    def test(pair: FamilyPair) -> Comparison:
        progress(
            f"testing family {pair.b} ({pair.trial_b}) against {pair.a} ({pair.trial_a}): "
            "rebuilding their ensembles (--no-family-test skips it)"
        )
        from analysis._comparison import compare_runs  # torch: only when the test runs

        run_ids = record.trials.set_index("trial_id")["run_id"]
        client = MlflowClient(tracking_uri=record.tracking_uri)
        try:
            run_a, run_b = (client.get_run(run_ids[t]) for t in (pair.trial_a, pair.trial_b))
            return compare_runs(client, run_a, run_b, progress=progress)
        except MlflowException as err:
            raise AnalysisError(f"the tracking store failed ({error_line(err)})") from None

    return test


def _publish(staging: Path, out: Path) -> None:
    """Move the figures and tables into ``out`` (each ``os.replace``: atomic), remove a
    previous report's that this one does not have, and the page last. The folders are
    made first: one that cannot be fails before any file is replaced."""
    for name, _ in _FOLDERS:
        (out / name).mkdir(exist_ok=True)
    for name, pattern in _FOLDERS:
        target = out / name
        fresh = {p.name for p in (staging / name).glob(pattern)}
        for stale in target.glob(pattern):  # a previous report's, perhaps of other trials
            if stale.name not in fresh:
                stale.unlink()
        for file in sorted(fresh):
            os.replace(staging / name / file, target / file)
    os.replace(staging / _PAGE, out / _PAGE)


def _importances(record: SearchRecord, given: str | None) -> Importances:
    """Optuna's importances from ``given`` (``--optuna-storage``, checked by ``main``),
    else the study the search recorded or the one beside its tracking store; a note
    when that cannot be read (never creating a study file that is not there)."""
    storage = (
        given
        or record.parent_params.get("optuna_storage")  # recorded by the search driver
        or default_optuna_storage(record.tracking_uri, record.experiment)
    )
    empty = pd.DataFrame(columns=["objective", "param", "importance"])
    try:
        if storage and not given:
            check_optuna_storage(storage, "the search's Optuna study")
        return param_importances(storage, record.experiment, record.parent_params.get("objective"))
    except AnalysisError as err:
        return Importances(empty, f"{err}: no importances")
    except Exception as err:  # Optuna and SQLAlchemy raise many kinds for a bad storage
        if given:
            raise AnalysisError(f"--optuna-storage {given}: {error_line(err)}") from None
        return Importances(empty, f"the Optuna study in {storage} cannot be read ({err})")


def check_optuna_storage(url: str, what: str) -> None:
    """An sqlite study must exist and be one: Optuna would create a missing file."""
    path = sqlite_path(url)
    if path is not None:
        check_sqlite_file(path, what, OPTUNA_TABLES, "Optuna study")


def check_finished(record: SearchRecord, *, partial: bool = False) -> None:
    """Some trial must have recorded an epoch, and one must have finished (its test
    metrics) unless ``partial``."""
    if record.history.empty:
        raise AnalysisError(f"experiment {record.experiment!r}: no trial recorded any epoch yet")
    outcomes = Counter(record.trials["outcome"])
    if outcomes.get("finished", 0) == 0 and not partial:
        listed = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items()))
        raise AnalysisError(
            f"experiment {record.experiment!r} has no finished trial ({listed}); pass "
            "--partial to report the dev metrics recorded so far"
        )


def log_report(record: SearchRecord, out: Path) -> None:
    """The page, figures and tables into the parent run's ``report/`` artifacts."""
    if record.parent_run_id is None:
        raise AnalysisError("the search has no parent run to log the report to (--no-log)")
    client = MlflowClient(tracking_uri=record.tracking_uri)
    try:
        client.log_artifact(record.parent_run_id, str(out / _PAGE), ARTIFACT_PATH)
        for folder, _ in _FOLDERS:
            client.log_artifacts(
                record.parent_run_id, str(out / folder), f"{ARTIFACT_PATH}/{folder}"
            )
    except (MlflowException, OSError) as err:
        raise AnalysisError(
            f"the report is in {out}, but logging it to the parent run "
            f"{record.parent_run_id} failed ({error_line(err)}); pass --no-log to skip it"
        ) from None


def default_out(runs_dir: str | os.PathLike[str], experiment: str) -> Path:
    """``RUNS_DIR/reports/NAME``, a path separator in the name made ``_`` so that any
    name (``/Users/me/margins``, ``..``) is one folder inside ``reports/``."""
    folder = re.sub(r"[/\\\x00]", "_", experiment)
    return RunsLayout.at(runs_dir).report("_" if folder in ("", ".", "..") else folder)


def _check_out(out: Path, what: str) -> None:
    """Fail before reading the search when the report cannot go to ``out``."""
    if out.exists() and not out.is_dir():
        raise AnalysisError(f"{what}: is a file; expected a folder (for {_PAGE}, figures/ ...)")
    existing = next((p for p in (out, *out.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        raise AnalysisError(f"{what}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise AnalysisError(f"{what}: {existing} is not writable")


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m analysis.report",
        description="Write the report of a search (one HTML page, its figures and tables).",
        epilog="Exit status: 0 written, 2 bad input (one 'error:' line naming it).",
    )
    parser.add_argument(
        "--experiment",
        default=None,
        help="the search (its MLflow experiment; default: the search that started last in "
        "--runs-dir, by its record RUNS_DIR/searches/NAME.json)",
    )
    parser.add_argument(
        "--runs-dir",
        type=Path,
        default=Path("runs"),
        help="the search's --runs-dir (its sqlite tracking store; default: %(default)s)",
    )
    parser.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow tracking URI (default: sqlite:///RUNS_DIR/mlflow.db)",
    )
    parser.add_argument(
        "--out",
        type=_folder,
        default=None,
        help="output folder, created if needed (default: RUNS_DIR/reports/EXPERIMENT, a '/' "
        "in the name made '_'); a report already there is replaced",
    )
    parser.add_argument(
        "--optuna-storage",
        default=None,
        help="the search's Optuna storage URL (default: the one the search recorded, else "
        "RUNS_DIR/tune/EXPERIMENT.optuna.db beside a sqlite tracking store)",
    )
    parser.add_argument(
        "--partial",
        action="store_true",
        help="report a search with no finished trial (dev metrics only)",
    )
    parser.add_argument(
        "--no-log", action="store_true", help="do not log the report to the search's parent run"
    )
    parser.add_argument(
        "--no-family-test",
        action="store_true",
        help="with several encoder families, do not test the two leading families' best "
        "trials against each other (it rebuilds their ensembles on the search's store)",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress lines on stderr (shown only when it is a terminal; what was "
        "written, notes and errors stay)",
    )
    return parser


def _folder(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a folder, got {text!r}")
    return Path(text)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return run_cli(
        lambda: _report(args), "interrupted; run the same command again to write the report"
    )


def _report(args: argparse.Namespace) -> int:
    if args.experiment is None:
        args.experiment, started = latest_experiment(args.runs_dir)
        print(
            f"reporting {args.experiment!r}, the latest search in {args.runs_dir} (started "
            f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started))}; --experiment "
            "NAME picks another)",
            file=sys.stderr,
        )
    uri = tracking_uri_for(args.tracking_uri, args.runs_dir)
    out = args.out or default_out(args.runs_dir, args.experiment)
    _check_out(out, f"--out {out}" if args.out else f"the report folder {out}")
    if args.optuna_storage:
        check_optuna_storage(args.optuna_storage, f"--optuna-storage {args.optuna_storage}")
    say = progress_printer("report", args.quiet)
    say(f"reading the search {args.experiment!r} from {uri}")
    record = load_search(open_client(uri), uri, args.experiment)
    check_finished(record, partial=args.partial)
    page = write_report(
        record, out, args.optuna_storage, family_test=not args.no_family_test, progress=say
    )
    for note in record.notes:
        print(f"note: {note}", file=sys.stderr)
    lines = [f"wrote {page} (figures in {out / 'figures'}, tables in {out / 'tables'})"]
    if not args.no_log:
        say(f"logging the report to the search's run {record.parent_run_id}")
        log_report(record, out)
        lines.append(
            f"logged to run {record.parent_run_id} under {ARTIFACT_PATH}/: "
            f"mlflow ui --backend-store-uri {uri}"
        )
    return print_out("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
