"""`--resume` that extends: a finished real search (`--smoke-test`, a real local Ray, a
real MLflow sqlite store, a real Optuna study) resumed with a larger `--num-samples` runs
the extra trials in the same study and keeps the new number in its record; resumed again
it has nothing to run (exit 0, one line); a smaller number is one `error:` line. Also the
search's closing lines: the exact report and optuna-dashboard commands. The finished search
extended is test_drivers.py's first experiment, a search that ran to its end at once
(``extends_a_finished_search`` here checks it): one of its own would cost another search."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path

import optuna
import pytest

from gridsearch._layout import RunsLayout
from gridsearch._record import STARTED
from gridsearch.run import main
from gridsearch.settings import SearchError, SearchSettings
from gridsearch.summary import closing_commands, dashboard_command, report_command
from tests.gridsearch.test_run import check_runs


def _study(runs: Path, name: str) -> optuna.Study:
    storage = f"sqlite:///{runs / 'tune' / f'{name}.optuna.db'}"
    return optuna.load_study(study_name=name, storage=storage)


def extends_a_finished_search(
    runs: Path, experiment: str, out: str, capsys: pytest.CaptureFixture[str], mlflow_runs,
    on_cluster: list[str],
) -> None:  # fmt: skip
    """A search of ``experiment`` in ``runs`` (its real path) that has just finished its 2
    trials and printed ``out``: its closing lines say how to go on; resumed with fewer trials
    it is refused, with 3 it runs one more in the same study; then it has nothing to run."""
    assert "2 trials: 2 finished" in out
    lines = out.splitlines()
    report = f"python -m analysis.report --runs-dir {runs} --experiment {experiment}"
    assert f"write its report:  {report}" in lines
    dashboard = f"optuna-dashboard sqlite:///{runs / 'tune' / f'{experiment}.optuna.db'}"
    # with the install hint where optuna-dashboard (an optional extra) is missing
    hint = (
        "" if importlib.util.find_spec("optuna_dashboard") else "   (pip install optuna-dashboard)"
    )
    assert f"its Optuna study:  {dashboard}{hint}" in lines
    resume = (f"python -m gridsearch.run --experiment {experiment} --resume --runs-dir {runs} "
              f"--address {on_cluster[1]}")  # fmt: skip
    assert any(line.endswith(f"{resume} --num-samples N") for line in lines)
    record_path = RunsLayout.at(runs).record(experiment)
    record = json.loads(record_path.read_text())
    assert record["num_samples"] == 2 and record[STARTED]

    resume_argv = [*shlex.split(resume)[3:], "--no-dashboard"]  # the command it printed
    assert main([*resume_argv, "--num-samples", "1"]) == 2  # fewer than it ran: refused
    err = capsys.readouterr().err
    expected = f"error: --num-samples 1: the search '{experiment}' was asked for 2 trials"
    assert err.startswith(expected), err
    assert err.count("\n") == 1 and json.loads(record_path.read_text()) == record

    assert main([*resume_argv, "--num-samples", "3"]) == 0  # extended by one trial
    out = capsys.readouterr().out
    assert f"resuming '{experiment}' up to 3 trials" in out and "3 trials: 3 finished" in out
    client, found = mlflow_runs(runs, experiment)
    check_runs(client, found, trials=3, epochs=2)
    study = _study(runs, experiment)
    assert sorted(t.number for t in study.trials) == [0, 1, 2]  # the same study, continued
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    extended = json.loads(record_path.read_text())
    assert extended == {**record, "num_samples": 3}  # the new number, the same start

    for again in ([], ["--num-samples", "3"]):  # finished: nothing to run
        assert main([*resume_argv, *again]) == 0
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1, err
        nothing = f"the search '{experiment}' has run all its 3 trials: nothing to run"
        assert err.startswith(nothing), err
        assert report in err
    assert len(_study(runs, experiment).trials) == 3
    assert len(mlflow_runs(runs, experiment)[1]) == 4  # the search's run and three trials'


def _recorded(runs: Path, num_samples: int | None) -> None:
    """The record of a search `e` that started asking for `num_samples` trials."""
    settings = SearchSettings.from_argv(
        ["--space", "margin_sweep", "--runs-dir", str(runs), "--experiment", "e"]
    )
    settings.save_record(num_samples=num_samples)


def _resumed(runs: Path, *more: str) -> SearchSettings:
    argv = ["--resume", "--experiment", "e", "--runs-dir", str(runs), *more]
    return SearchSettings.from_argv(argv)


def test_resume_takes_a_larger_num_samples_and_refuses_a_smaller_one(tmp_path: Path) -> None:
    _recorded(tmp_path, 4)
    assert _resumed(tmp_path).num_samples == 4  # the record's
    assert _resumed(tmp_path, "--num-samples", "4").num_samples == 4
    assert _resumed(tmp_path, "--num-samples", "9").num_samples == 9  # extends it
    for fewer, message in (
        ("3", "--num-samples 3: the search 'e' was asked for 4 trials, and a --resume cannot"),
        ("0", "--num-samples: got 0, expected a positive integer"),
    ):
        with pytest.raises(SearchError, match=re.escape(message)):
            _resumed(tmp_path, "--num-samples", fewer)
    with pytest.raises(SearchError, match="not through Ray Client"):
        _resumed(tmp_path, "--num-samples", "9", "--address", "ray://head:10001")
    assert _resumed(tmp_path, "--address", "ray://head:10001").num_samples == 4  # continues


def test_a_record_that_left_the_number_to_the_search_takes_any(tmp_path: Path) -> None:
    """Records written before searches recorded their number of trials hold None."""
    _recorded(tmp_path, None)
    assert _resumed(tmp_path).num_samples is None
    assert _resumed(tmp_path, "--num-samples", "2").num_samples == 2


def test_the_closing_commands_are_exact(tmp_path: Path) -> None:
    runs = tmp_path / "my runs"
    base = ["--space", "margin_sweep", "--runs-dir", str(runs), "--experiment", "e"]
    settings = SearchSettings.from_argv(base)
    root = shlex.quote(str(runs.resolve()))
    assert report_command(settings) == f"python -m analysis.report --runs-dir {root} --experiment e"
    study = shlex.quote(f"sqlite:///{runs.resolve() / 'tune' / 'e.optuna.db'}")
    assert dashboard_command(settings) == f"optuna-dashboard {study}"
    assert shlex.split(dashboard_command(settings))[1].startswith("sqlite:////")
    database = "postgresql://optuna:s3cret@db/optuna"
    remote = SearchSettings.from_argv(
        [*base, "--tracking-uri", "http://127.0.0.1:5000", "--optuna-storage", database]
    )
    assert report_command(remote, partial=True) == (
        f"python -m analysis.report --runs-dir {root} --experiment e "
        "--tracking-uri http://127.0.0.1:5000 --partial"
    )
    assert dashboard_command(remote) == "optuna-dashboard 'postgresql://optuna:***@db/optuna'"
    lines = dict(closing_commands(remote))
    assert lines["compare the runs"] == "open http://127.0.0.1:5000 (the MLflow server)"
    assert "s3cret" not in " ".join(lines.values())
