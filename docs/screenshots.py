"""The documentation's screenshots, taken by headless Chromium: from MLflow's own UI, the
runs table of a search (the link the search prints), its chart view and the trade-off artifact
(``tradeoff.png``) of its best trial; and the top of the search's report
(``python -m analysis.report``).

    python docs/screenshots.py                          # runs the main job first
    python docs/screenshots.py --smoke-test             # a 2-trial smoke search instead
    python docs/screenshots.py --runs-dir runs --experiment margin_sweep-20261122-101500

Without ``--runs-dir`` it runs ``python -m gridsearch.run --space margin_sweep`` (the
CPU-sized default, a few minutes on 2 cores; ``--smoke-test`` for its smoke test) into a
temporary runs directory. Writes ``docs/img/mlflow-runs.png``, ``docs/img/mlflow-charts.png``,
``docs/img/mlflow-tradeoff.png`` and ``docs/img/report.png`` (``--out``), the MLflow ones
without the UI's assistant panel, all reduced to 256 colours.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from mlflow.tracking import MlflowClient  # noqa: E402
from PIL import Image  # noqa: E402

from gridsearch import (  # noqa: E402
    ROLE_SEARCH,
    ROLE_TAG,
    TRIAL_TAG,
    best_trial_tag,
    results_url,
)
from gridsearch.tracking import CHARTS_VIEW, charts_url  # noqa: E402
from tests.gridsearch.tracking.mlflow_ui import MlflowUI, chromium, screenshot  # noqa: E402
from trainables import names  # noqa: E402

RUNS_WINDOW = (2300, 560)  # wide enough for every column of the results view
CHARTS_WINDOW = (1700, 2050)  # the trials' trade-off images, then the R@10 chart
ARTIFACT_WINDOW = (1500, 720)
REPORT_WINDOW = (1280, 1500)  # the report's facts, trials table and trade-off curves
GAP = {(v, v, v) for v in range(240, 247)}  # the page's background between the UI's panels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs-dir", type=Path, help="of an existing search (default: run one)")
    parser.add_argument(
        "--experiment", default="margin_sweep", help="its name (default: %(default)s)"
    )
    parser.add_argument(
        "--smoke-test",
        action="store_true",
        help="without --runs-dir, run the search's --smoke-test (2 small trials) instead of "
        "the main job",
    )
    parser.add_argument(
        "--out", type=Path, default=REPO / "docs" / "img", help="folder (default: docs/img)"
    )
    args = parser.parse_args(argv)
    try:
        if chromium() is None:
            raise ValueError("Chromium is not installed: nothing can take the screenshots")
        with tempfile.TemporaryDirectory() as scratch:
            runs_dir = args.runs_dir or _search(Path(scratch), args.experiment, args.smoke_test)
            database = runs_dir.resolve() / "mlflow.db"
            if not database.is_file():
                raise ValueError(f"--runs-dir {runs_dir}: no mlflow.db, not a search's runs")
            uri = f"sqlite:///{database}"
            experiment_id, trial_run = _best_trial(MlflowClient(uri), args.experiment)
            args.out.mkdir(parents=True, exist_ok=True)
            with MlflowUI(uri, Path(scratch) / "mlflow-ui.log") as ui:
                pages = {
                    "mlflow-runs.png": (results_url(experiment_id, ui.url), RUNS_WINDOW),
                    "mlflow-charts.png": (
                        charts_url(experiment_id, ui.url, CHARTS_VIEW),
                        CHARTS_WINDOW,
                    ),
                    "mlflow-tradeoff.png": (
                        f"{ui.url}/#/experiments/{experiment_id}/runs/{trial_run}/"
                        "artifactPath/tradeoff.png?workflowType=machine_learning",
                        ARTIFACT_WINDOW,
                    ),
                }
                for name, (url, window) in pages.items():
                    # the charts load their metric histories one by one
                    shot = screenshot(url, Path(scratch) / name, 90_000, window)
                    _save_small(shot, args.out / name)
                    print(f"{args.out / name}: {(args.out / name).stat().st_size / 1024:.0f} KB")
            page = _report(runs_dir, args.experiment, Path(scratch) / "report")
            shot = screenshot(page.as_uri(), Path(scratch) / "report.png", 30_000, REPORT_WINDOW)
            written = args.out / "report.png"
            _quantize(Image.open(shot).convert("RGB"), written)
            print(f"{written}: {written.stat().st_size / 1024:.0f} KB")
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def _search(scratch: Path, experiment: str, smoke: bool) -> Path:
    """The main job (or its smoke test), as ``gridsearch.run`` runs it."""
    from gridsearch.run import main as run_search

    runs_dir = scratch / "runs"
    argv = ["--space", "margin_sweep", "--runs-dir", str(runs_dir), "--no-dashboard"]
    argv += ["--smoke-test"] if smoke else []
    if run_search([*argv, "--experiment", experiment]) != 0:
        raise ValueError("the search did not finish (its output above says why)")
    return runs_dir


def _best_trial(client: MlflowClient, experiment: str) -> tuple[str, str]:
    """The experiment's id and the run id of its best trial on dev R@10 mean."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise ValueError(f"--experiment {experiment}: no such MLflow experiment")
    ids = [found.experiment_id]
    parents = client.search_runs(ids, f"tags.`{ROLE_TAG}` = '{ROLE_SEARCH}'")
    trial = parents[0].data.tags.get(best_trial_tag(names.BEST_RETRIEVAL)) if parents else None
    runs = client.search_runs(ids, f"tags.`{TRIAL_TAG}` = '{trial}'") if trial else []
    if not runs:
        raise ValueError(f"--experiment {experiment}: no search that ended with a best trial")
    return str(found.experiment_id), str(runs[0].info.run_id)


def _report(runs_dir: Path, experiment: str, out: Path) -> Path:
    """The search's report page, written by ``analysis.report`` into ``out``."""
    from analysis.report import main as report

    argv = ["--runs-dir", str(runs_dir), "--experiment", experiment, "--out", str(out)]
    if report([*argv, "--no-log", "--quiet"]) != 0:
        raise ValueError("the report could not be written (its error above says why)")
    return (out / "report.html").resolve()


def _quantize(image: Image.Image, out: Path) -> None:
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)


def _save_small(shot: Path, out: Path) -> None:
    """``shot`` without the assistant panel on its right, in 256 colours."""
    image = Image.open(shot).convert("RGB")
    width, height = image.size
    heights = [height * k // 10 for k in range(3, 8)]

    def in_gap(x: int) -> bool:  # the light grey between the UI's panels, top to bottom
        return all(image.getpixel((x, y)) in GAP for y in heights)

    right = width
    for x in range(width - 200, width // 2, -1):  # the gap left of the assistant panel
        if all(in_gap(x - k) for k in range(6)):
            right = x - 1
            break
    _quantize(image.crop((0, 0, right, height)), out)


if __name__ == "__main__":
    sys.exit(main())
