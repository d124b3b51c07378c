"""Hyperparameter importances from a stored Optuna study, and the notes instead of them."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from analysis._importance import default_optuna_storage, objective_names, param_importances
from trainables import names


def _study(tmp_path: Path, trials: int, *, two_params: bool = True) -> str:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(
        study_name="s", storage=storage, directions=["maximize", "maximize"],
        sampler=optuna.samplers.RandomSampler(seed=0),
    )  # fmt: skip

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        margin = trial.suggest_float("margin", 0.05, 0.5)
        noise = trial.suggest_float("noise", 0.0, 1.0) if two_params else 0.0
        # retrieval peaks at margin 0.2 and ignores noise; semantic follows noise
        return -((margin - 0.2) ** 2), noise

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study.optimize(objective, n_trials=trials)
    return storage


def test_importances_per_objective_of_a_maximised_study(tmp_path: Path) -> None:
    result = param_importances(_study(tmp_path, 30), "s", "both")
    assert result.note is None
    table = result.table.set_index(["objective", "param"])["importance"]
    assert set(table.index.get_level_values(0)) == {names.BEST_RETRIEVAL, names.BEST_SEMANTIC}
    assert table[(names.BEST_RETRIEVAL, "margin")] > table[(names.BEST_RETRIEVAL, "noise")]
    assert table[(names.BEST_SEMANTIC, "noise")] > table[(names.BEST_SEMANTIC, "margin")]


@pytest.mark.parametrize(
    ("trials", "two_params", "note"),
    [
        (1, True, "1 completed Optuna trial(s): importances need at least two"),
        (5, False, "one searched parameter (margin): its importance is 1 by definition"),
    ],
)
def test_a_note_instead_of_importances(
    tmp_path: Path, trials: int, two_params: bool, note: str
) -> None:
    result = param_importances(_study(tmp_path, trials, two_params=two_params), "s", "both")
    assert result.table.empty and result.note is not None and result.note.startswith(note)


def test_missing_study_or_storage_is_a_note(tmp_path: Path) -> None:
    assert param_importances(None, "s", "both").note.startswith("no Optuna study found")  # type: ignore[union-attr]
    storage = _study(tmp_path, 2)
    assert "no Optuna study 'other'" in str(param_importances(storage, "other", "both").note)


def test_default_storage_lies_beside_a_sqlite_tracking_store(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert default_optuna_storage(uri, "x") is None  # not there
    (tmp_path / "tune").mkdir()
    (tmp_path / "tune" / "x.optuna.db").touch()
    assert default_optuna_storage(uri, "x") == f"sqlite:///{tmp_path / 'tune' / 'x.optuna.db'}"
    assert default_optuna_storage("http://localhost:5000", "x") is None


def test_objective_names() -> None:
    assert objective_names("retrieval", 1) == [names.BEST_RETRIEVAL]
    assert objective_names(None, 2) == ["objective 0", "objective 1"]
