"""``python -m analysis.report``: the paper's views of a search, as one HTML page.

    python -m analysis.report --experiment margins --runs-dir runs --out reports/margins

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
import sys
import time
from collections import Counter
from pathlib import Path

from analysis import _sections
from analysis._data import AnalysisError, SearchRecord, load_search, open_client, tracking_uri_for
from analysis._html import render_page
from analysis._importance import default_optuna_storage, param_importances
from gridsearch._layout import RunsLayout

__all__ = [
    "ARTIFACT_PATH",
    "check_finished",
    "log_report",
    "main",
    "write_report",
]


logger = logging.getLogger(__name__)
ARTIFACT_PATH = "report"


def write_report(record: SearchRecord, out: Path, optuna_storage: str | None = None) -> Path:
    """Compute, draw and write the report of ``record`` into ``out``; returns the page."""
    target = _sections.Output(out)
    storage = (
        optuna_storage
        or record.parent_params.get("optuna_storage")  # recorded by the search driver
        or default_optuna_storage(record.tracking_uri, record.experiment)
    )
    importances = param_importances(
        storage, record.experiment, record.parent_params.get("objective")
    )
    sections = [
        _sections.trials_section(record, target),
        _sections.tradeoff_section(record, target),
        _sections.sensitivity_section(record, target),
        _sections.pareto_section(record, target),
        _sections.importance_section(importances, target),
        _sections.paper_tables_section(record, target),
    ]
    page = out / "report.html"
    page.write_text(
        render_page(f"Search {record.experiment}", _facts(record), record.notes, sections)
    )
    return page


def _facts(record: SearchRecord) -> list[str]:
    params = record.parent_params
    outcomes = Counter(record.trials["outcome"])
    searched = ", ".join(f"{p} ({k})" for p, k in record.param_kinds.items()) or "(none varies)"
    return [
        f"space {params.get('space', '?')}: searched {searched}; objective "
        f"{params.get('objective', '?')}; {params.get('sampler', '?')}, scheduler "
        f"{params.get('scheduler', '?')}; {params.get('epochs', '?')} epochs per trial",
        f"{len(record.trials)} trials: "
        + ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())),
        f"data: {params.get('data', '?')} (data set {record.dataset or 'unknown'}, "
        + ", ".join(f"{k} {v} images" for k, v in record.split_images.items())
        + f"); semantic sets: {params.get('senteval', '?')}",
        f"tracking: {record.tracking_uri}, parent run {record.parent_run_id}; code "
        f"{params.get('code_version', '?')}; report written {time.strftime('%Y-%m-%d %H:%M')}",
    ]


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
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=record.tracking_uri)
    client.log_artifact(record.parent_run_id, str(out / "report.html"), ARTIFACT_PATH)
    for folder in ("figures", "tables"):
        client.log_artifacts(record.parent_run_id, str(out / folder), f"{ARTIFACT_PATH}/{folder}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m analysis.report", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--experiment", required=True, help="the search (its MLflow experiment)")
    parser.add_argument(
        "--runs-dir",
        type=Path,
        default=Path("runs"),
        help="the search's --runs-dir (its sqlite tracking store; default runs)",
    )
    parser.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow tracking URI (default: sqlite:///RUNS_DIR/mlflow.db)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output folder (default: RUNS_DIR/reports/EXPERIMENT)",
    )
    parser.add_argument(
        "--optuna-storage",
        default=None,
        help="the search's Optuna storage URL (default: "
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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    uri = tracking_uri_for(args.tracking_uri, args.runs_dir)
    out = args.out or RunsLayout.at(args.runs_dir).report(args.experiment)
    try:
        record = load_search(open_client(uri), uri, args.experiment)
        check_finished(record, partial=args.partial)
        out.mkdir(parents=True, exist_ok=True)
        page = write_report(record, out, args.optuna_storage)
        if not args.no_log:
            log_report(record, out)
    except AnalysisError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for note in record.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {page} (figures in {out / 'figures'}, tables in {out / 'tables'})")
    if not args.no_log:
        print(
            f"logged to run {record.parent_run_id} under {ARTIFACT_PATH}/: "
            f"mlflow ui --backend-store-uri {uri}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
