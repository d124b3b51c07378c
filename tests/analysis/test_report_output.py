"""Where `python -m analysis.report` writes: an --out that cannot be a folder is one
`error:` line before anything is read; a report is written whole or not at all; any
experiment name gives one folder inside RUNS_DIR/reports/."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from analysis.report import main
from tests.analysis.helpers import write_search
from trainables import names

R, S = names.PRIMARY_RETRIEVAL, names.PRIMARY_SEMANTIC
# "{root}": the runs directory, so that an absolute name stays inside it (a report
# that escapes reports/ lands where the test sees it, never elsewhere on the machine)
NAMES = ["good", "../escape", "{root}/absolute/margins", 'it\'s "quoted"', ".."]


def _trial(trial_id: str, margin: float) -> dict[str, object]:
    epochs = [{R: r, S: s, names.BEST_RETRIEVAL: r, names.BEST_SEMANTIC: s}
              for r, s in ((5.0, 0.3), (40.0, 0.5))]  # fmt: skip
    final = {names.key(names.ENSEMBLE, "r10_mean"): 60.0}
    return {"trial_id": trial_id, "outcome": "finished", "params": {"margin": margin},
            "epochs": epochs, "final": final}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs directory with one finished two-trial search under each of NAMES."""
    root = tmp_path_factory.mktemp("runs")
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    for index, name in enumerate(NAMES):
        artifacts = root / "artifacts" / str(index)
        name = name.format(root=root)
        write_search(client, artifacts, name, [_trial("a", 0.1), _trial("b", 0.3)])
    gone = {"optuna_storage": f"sqlite:///{root / 'gone.optuna.db'}"}  # moved away since
    write_search(client, root / "artifacts" / "x", "recorded", [_trial("a", 0.1)], gone)
    return root


def _run(runs: Path, capsys, *args: str) -> tuple[int, str, list[str]]:
    code = main(["--runs-dir", str(runs), "--no-log", *args])
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


def _tree(folder: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None
        for p in sorted(folder.rglob("*"))
    }


def test_an_out_that_is_a_file_is_refused_and_left_alone(
    runs: Path, tmp_path: Path, capsys
) -> None:
    target = tmp_path / "report.html"
    target.write_text("my notes, not a report folder")
    inside = target / "sub"
    for out, message in ((target, "is a file; expected a folder"),
                         (inside, f"{target} is a file, not a folder")):  # fmt: skip
        code, stdout, err = _run(runs, capsys, "--experiment", "good", "--out", str(out))
        assert code == 2 and stdout == ""
        assert err == [err[0]] and err[0].startswith(f"error: --out {out}: ") and message in err[0]
    assert _tree(tmp_path) == {"report.html": b"my notes, not a report folder"}


def test_an_out_in_a_read_only_folder(runs: Path, tmp_path: Path, capsys) -> None:
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        try:
            (folder / "probe").write_bytes(b"")
        except PermissionError:
            pass
        else:
            pytest.skip("this process writes into a read-only folder (root): nothing to test")
        out = folder / "report"
        code, _, err = _run(runs, capsys, "--experiment", "good", "--out", str(out))
        assert code == 2 and err == [f"error: --out {out}: {folder} is not writable"]
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o755)


def test_a_failed_write_leaves_the_previous_report_whole(
    runs: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "report"
    code, _, err = _run(runs, capsys, "--experiment", "good", "--out", str(out))
    assert code == 0, err
    (out / "figures" / "stale-of-another-search.png").write_bytes(b"old figure")
    for table in (out / "tables").iterdir():
        table.unlink()
    (out / "tables").rmdir()
    (out / "tables").write_text("a file where the tables folder was")  # the next write fails
    before = _tree(out)
    code, stdout, err = _run(runs, capsys, "--experiment", "good", "--out", str(out))
    assert code == 2 and stdout == ""
    assert err == [err[0]] and err[0].startswith(f"error: --out {out}: writing the report failed")
    assert _tree(out) == before  # the page, every figure, even the stale one: untouched

    (out / "tables").unlink()
    code, _, err = _run(runs, capsys, "--experiment", "good", "--out", str(out))
    assert code == 0, err
    after = _tree(out)
    assert "figures/stale-of-another-search.png" not in after  # a previous report's, removed
    assert "tables/trials.csv" in after and "figures/pareto.png" in after
    assert not [p for p in after if Path(p).name.startswith(".")]  # no staging folder left


@pytest.mark.parametrize(
    ("name", "folder"),
    [
        ("good", "good"),
        ("../escape", ".._escape"),
        ("{root}/absolute/margins", "{flat}_absolute_margins"),
        ('it\'s "quoted"', 'it\'s "quoted"'),
        ("..", "_"),
    ],
)
def test_every_experiment_name_is_one_folder_in_reports(
    runs: Path, capsys, name: str, folder: str
) -> None:
    name = name.format(root=runs)
    folder = folder.format(flat=str(runs).replace("/", "_"))
    code, out, err = _run(runs, capsys, "--experiment", name)
    assert code == 0, err
    page = runs / "reports" / folder / "report.html"
    assert out.startswith(f"wrote {page} ") and page.is_file()
    assert sorted(p.name for p in runs.iterdir()) == ["mlflow.db", "reports"]


def test_an_unknown_experiment_creates_no_folder(tmp_path: Path, runs: Path, capsys) -> None:
    out = tmp_path / "new" / "report"
    code, _, err = _run(runs, capsys, "--experiment", "nope", "--out", str(out))
    assert code == 2 and err[0].startswith("error: --experiment 'nope': no such MLflow")
    assert list(tmp_path.iterdir()) == []


def test_a_recorded_study_that_is_gone_is_a_note_and_not_created(
    runs: Path, tmp_path: Path, capsys
) -> None:
    code, _, err = _run(runs, capsys, "--experiment", "recorded", "--out", str(tmp_path))
    assert code == 0, err
    assert not (runs / "gone.optuna.db").exists()  # Optuna would have created an empty study
    page = (tmp_path / "report.html").read_text()
    assert f"{runs / 'gone.optuna.db'} does not exist: no importances" in page


@pytest.mark.parametrize(
    ("storage", "message"),
    [
        ("bogus://x", "NoSuchModuleError"),
        ("sqlite:///{runs}/mlflow.db", "without the tables of an Optuna study (studies, trials)"),
    ],
)
def test_an_optuna_storage_that_cannot_be_used_is_an_error(
    runs: Path, tmp_path: Path, capsys, storage: str, message: str
) -> None:
    storage = storage.format(runs=runs)
    argv = ["--experiment", "good", "--out", str(tmp_path / "r"), "--optuna-storage", storage]
    code, out, err = _run(runs, capsys, *argv)
    assert code == 2 and out == "" and len(err) == 1
    assert err[0].startswith(f"error: --optuna-storage {storage}: ") and message in err[0]
    assert list(tmp_path.iterdir()) == []  # no report folder left behind
