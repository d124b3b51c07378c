"""Hyperparameter importances from the search's Optuna study (computing only).

The driver keeps the study in ``<runs_dir>/tune/<experiment>.optuna.db`` (study name =
the experiment) unless ``--optuna-storage`` said otherwise; the report takes its own
``--optuna-storage``, else the URL the search's parent run recorded, else looks beside
the sqlite tracking database.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import NamedTuple

import pandas as pd
from optuna.trial import FrozenTrial

from gridsearch import RunsLayout
from gridsearch.settings import OBJECTIVES

logger = logging.getLogger(__name__)


class Importances(NamedTuple):
    table: pd.DataFrame  # objective, param, importance (normalised to sum 1 per objective)
    note: str | None  # why there is nothing (or only part) to show


def default_optuna_storage(tracking_uri: str, experiment: str) -> str | None:
    """``sqlite:///<runs_dir>/tune/<experiment>.optuna.db`` beside a sqlite tracking DB."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    layout = RunsLayout.at(Path(tracking_uri.removeprefix("sqlite:///")).parent)
    path = layout.optuna_db(experiment, str(layout.tune))
    return f"sqlite:///{path}" if path.exists() else None


def objective_names(objective: str | None, count: int) -> list[str]:
    """The metric each of the study's ``count`` objectives is (from the search's
    ``objective`` parameter: retrieval, semantic or both)."""
    metrics = OBJECTIVES.get(objective or "", (None, None))[0]
    listed = metrics if isinstance(metrics, list) else [metrics] if metrics else []
    if len(listed) != count:
        return [f"objective {i}" for i in range(count)]
    return [str(m) for m in listed]


def param_importances(storage: str | None, study_name: str, objective: str | None) -> Importances:
    """Optuna's ``get_param_importances`` (PED-ANOVA by default) per objective; a note
    instead when there is no study, fewer than two completed trials or one parameter."""
    empty = pd.DataFrame(columns=["objective", "param", "importance"])
    if storage is None:
        return Importances(
            empty, "no Optuna study found beside the tracking store (pass --optuna-storage URL)"
        )
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except (KeyError, ValueError) as err:  # no such study in that storage
        return Importances(empty, f"no Optuna study {study_name!r} in {storage} ({err})")
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    params = sorted({p for t in complete for p in t.params})
    if len(complete) < 2:
        return Importances(
            empty,
            f"{len(complete)} completed Optuna trial(s): importances need at least two",
        )
    if len(params) < 2:
        return Importances(
            empty,
            f"one searched parameter ({', '.join(params) or 'none'}): its importance is 1 "
            "by definition; see the sensitivity plots instead",
        )
    rows = []
    labels = objective_names(objective, len(study.directions))
    for index, label in enumerate(labels):
        # PED-ANOVA asks what it takes to reach *low* target values: negate a maximised one.
        sign = -1.0 if study.directions[index] == optuna.study.StudyDirection.MAXIMIZE else 1.0

        def target(trial: FrozenTrial, i: int = index, s: float = sign) -> float:
            return s * float(trial.values[i])

        try:
            with warnings.catch_warnings():  # its reminder about low targets, heeded above
                warnings.filterwarnings("ignore", message="PedAnovaImportanceEvaluator")
                values = optuna.importance.get_param_importances(study, target=target)
        except (RuntimeError, ValueError) as err:
            return Importances(empty, f"Optuna could not compute importances: {err}")
        rows += [{"objective": label, "param": p, "importance": v} for p, v in values.items()]
    return Importances(pd.DataFrame(rows, columns=empty.columns), None)
