"""`python -m analysis.report` without `--experiment`: the search that started last in the
runs directory (by its record's start time), said in one line on stderr; a runs
directory without any search is one `error:` line. Searches written into a real MLflow
store (without Ray) beside real search records."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from analysis.report import main
from gridsearch._layout import RunsLayout
from gridsearch._record import STARTED, latest_search, started_at, write_record
from gridsearch.settings import SearchSettings
from tests.analysis.helpers import write_search
from trainables import names


def _trial(trial_id: str, margin: float) -> dict[str, object]:
    epochs = [
        {names.PRIMARY_RETRIEVAL: r, names.BEST_RETRIEVAL: best, "epoch": float(e)}
        for e, (r, best) in enumerate(((5.0, 5.0), (40.0, 40.0)))
    ]
    final = {names.key(names.ENSEMBLE, "r10_mean"): 60.0}
    return {"trial_id": trial_id, "outcome": "finished", "params": {"margin": margin},
            "epochs": epochs, "final": final}  # fmt: skip


def _record(runs: Path, experiment: str, started: str | None) -> Path:
    """A real search record (the settings of `--space margin_sweep`), started then."""
    settings = SearchSettings.from_argv(
        ["--space", "margin_sweep", "--runs-dir", str(runs), "--experiment", experiment]
    )
    path = RunsLayout.at(runs).record(experiment)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = settings.to_record() | ({STARTED: started} if started else {})
    path.write_text(json.dumps(record))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three searches: `zeta` started first, `alpha` last (so neither the name nor the
    file's age decides), and `old`, a record without a start time, in between."""
    root = tmp_path_factory.mktemp("runs")
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    for name in ("zeta", "alpha", "old"):
        write_search(client, root, name, [_trial(f"{name}1", 0.2), _trial(f"{name}2", 0.3)])
    alpha = _record(root, "alpha", "2026-03-02T10:00:00+0000")
    _record(root, "zeta", "2026-03-01T10:00:00+0000")
    old = _record(root, "old", None)
    moment = started_at(alpha) - 3600  # an hour before alpha started
    os.utime(old, (moment, moment))
    os.utime(alpha, (moment - 86400, moment - 86400))  # alpha's file looks oldest
    return root


def test_the_latest_search_is_the_last_to_start(runs: Path) -> None:
    layout = RunsLayout.at(runs)
    assert latest_search(layout) == ("alpha", started_at(layout.record("alpha")))
    assert started_at(layout.record("old")) == layout.record("old").stat().st_mtime
    layout.record("alpha").rename(layout.root / "alpha.json.moved")
    try:
        assert latest_search(layout) is not None and latest_search(layout)[0] == "old"
    finally:
        (layout.root / "alpha.json.moved").rename(layout.record("alpha"))


def test_report_without_experiment_reports_the_latest_search(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--runs-dir", str(runs), "--no-log"])
    out, err = capsys.readouterr()
    assert code == 0, err
    said = [line for line in err.splitlines() if line.startswith("reporting")]
    assert said == [
        f"reporting 'alpha', the latest search in {runs} (started "
        f"{_local(started_at(RunsLayout.at(runs).record('alpha')))}; --experiment NAME "
        "picks another)"
    ]
    page = RunsLayout.at(runs).report("alpha") / "report.html"
    assert page.is_file() and f"wrote {page}" in out
    assert "Search alpha" in page.read_text(encoding="utf-8")


def _local(seconds: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


@pytest.mark.parametrize("layout", ["missing", "empty", "no records"])
def test_a_runs_directory_without_a_search_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], layout: str
) -> None:
    runs = tmp_path / "runs"
    if layout != "missing":
        runs.mkdir()
    if layout == "no records":
        (runs / "searches").mkdir()
        (runs / "searches" / "notes.txt").write_text("not a record")
    assert main(["--runs-dir", str(runs)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"error: --runs-dir {runs}: holds no search (no record in ")
    assert not (runs / "mlflow.db").exists()  # nothing was created


def test_write_record_keeps_the_start_of_the_search(tmp_path: Path) -> None:
    path = tmp_path / "searches" / "e.json"
    write_record(path, {"experiment": "e", "num_samples": 4})
    first = json.loads(path.read_text())
    write_record(path, {"experiment": "e", "num_samples": 6})  # a --resume that extends it
    again = json.loads(path.read_text())
    assert again == {"experiment": "e", "num_samples": 6, STARTED: first[STARTED]}
    assert sorted(p.name for p in path.parent.iterdir()) == ["e.json"]  # no temporary left
    os.utime(path, (1_000_000, 1_000_000))
    write_record(path, {"experiment": "e", "num_samples": 6})  # a --resume that changes nothing
    assert path.stat().st_mtime == 1_000_000  # left untouched
