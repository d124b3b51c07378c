"""`python -m analysis.report` on searches written into a real MLflow store (without
Ray): bad input is `error: ...` with exit 2, and gaps in the data give a report of what
exists."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from analysis.report import main
from tests.analysis.helpers import write_search
from trainables import names

R, S = names.PRIMARY_RETRIEVAL, names.PRIMARY_SEMANTIC


def _epochs(retrieval: list[float], semantic: list[float] | None = None) -> list[dict[str, float]]:
    rows = []
    for e, r in enumerate(retrieval):
        row = {R: r, names.BEST_RETRIEVAL: max(retrieval[: e + 1]), "epoch": float(e)}
        if semantic is not None:
            row |= {S: semantic[e], names.BEST_SEMANTIC: max(semantic[: e + 1])}
        rows.append(row)
    return rows


def _finished(trial_id: str, margin: float, semantic: bool = True) -> dict[str, object]:
    test = {names.key(names.ENSEMBLE, k): v for k, v in (("r10_mean", 60.0), ("c2i_r1", 20.0))}
    return {
        "trial_id": trial_id,
        "outcome": "finished",
        "params": {"margin": margin, "hidden_size": 8, "search.helper": margin / 2},
        "epochs": _epochs([5.0, 40.0, 55.0], [0.3, 0.5, 0.45] if semantic else None),
        "final": test,
    }


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mlflow")
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    stopped = {"outcome": "stopped_early", "params": {"margin": 0.1}, "epochs": _epochs([5.0])}
    write_search(
        client, root, "all_stopped", [{**stopped, "trial_id": "s1"}, {**stopped, "trial_id": "s2"}]
    )
    failed = {"trial_id": "f1", "outcome": "failed", "params": {"margin": 0.4}}
    write_search(
        client,
        root,
        "gaps",
        [_finished("a1", 0.2), _finished("a2", 0.3, semantic=False), failed],
        {"data": str(root / "no-such-store"), "senteval": "null"},
    )
    write_search(client, root, "no_epochs", [failed])
    write_search(client, root, "empty", [])
    return root


def _run(store: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["--runs-dir", str(store), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_unknown_experiment_lists_the_ones_there_are(store: Path, capsys) -> None:
    code, _, err = _run(store, capsys, "--experiment", "nope", "--out", str(store / "r"))
    assert code == 2
    assert err == (
        "error: --experiment 'nope': no such MLflow experiment in this tracking store; "
        "there are: all_stopped, empty, gaps, no_epochs\n"
    )


def test_missing_tracking_store(tmp_path: Path, capsys) -> None:
    code, _, err = _run(tmp_path, capsys, "--experiment", "x")
    assert (
        code == 2 and err.startswith("error: tracking store sqlite:///") and "does not exist" in err
    )


@pytest.mark.parametrize(
    ("experiment", "message"),
    [
        ("empty", "experiment 'empty' holds no trial runs (1 run(s), none tagged search.role"),
        ("no_epochs", "experiment 'no_epochs': no trial recorded any epoch yet"),
        ("all_stopped", "experiment 'all_stopped' has no finished trial (2 stopped_early); pass "
         "--partial to report the dev metrics recorded so far"),
    ],
)  # fmt: skip
def test_nothing_to_report(store: Path, capsys, experiment: str, message: str) -> None:
    code, out, err = _run(store, capsys, "--experiment", experiment, "--out", str(store / "r"))
    assert code == 2 and out == ""
    assert err.startswith(f"error: {message}") and "Traceback" not in err


def test_partial_report_of_a_search_with_no_finished_trial(
    store: Path, tmp_path: Path, capsys
) -> None:
    code, out, _ = _run(
        store, capsys, "--experiment", "all_stopped", "--out", str(tmp_path), "--partial"
    )
    assert code == 0 and "logged to run" in out
    page = (tmp_path / "report.html").read_text()
    assert "no finished trial: there are no test metrics to tabulate" in page
    assert "data:image/png;base64," in page


def test_report_shows_what_exists_when_metrics_are_missing(
    store: Path, tmp_path: Path, capsys
) -> None:
    code, _, err = _run(store, capsys, "--experiment", "gaps", "--out", str(tmp_path), "--no-log")
    assert code == 0, err
    assert "note: the search's data store" in err and "cannot be read here" in err
    trials = pd.read_csv(tmp_path / "tables" / "trials.csv")
    assert trials["outcome"].tolist() == ["finished", "finished", "failed"]
    assert trials[names.BEST_SEMANTIC].isna().tolist() == [False, True, True]
    sensitivity = pd.read_csv(tmp_path / "tables" / "sensitivity.csv")
    assert sorted(sensitivity["trial_id"].unique()) == ["a1", "a2"]  # f1 has no metrics
    # hidden_size does not vary; a space's helper parameter (search.*) is not a TrainConfig key
    assert sensitivity["param"].unique().tolist() == ["margin"]
    assert sensitivity["ci_low"].isna().all()  # no store: no sample sizes
    curves = pd.read_csv(tmp_path / "tables" / "tradeoff_curves.csv")
    assert curves.groupby("trial_id").size().to_dict() == {"a1": 3, "a2": 3}
    page = (tmp_path / "report.html").read_text()
    assert "the data set is unknown" in page
    assert "one searched parameter (margin)" not in page  # no Optuna study: another note
    assert "no Optuna study found beside the tracking store" in page
    assert {p.name for p in (tmp_path / "figures").iterdir()} >= {
        "tradeoff_overlay.png", "sensitivity_margin.png", "pareto.png"
    }  # fmt: skip
