"""A search read back from MLflow into data frames (the layout of gridsearch.tracking).

``load_search(client, experiment)`` returns a :class:`SearchRecord`: one row per trial
(its searched parameters and final metrics), the per-epoch history of the metrics the
curves need, and what the search's data store and semantic sets say about sample
sizes (for the intervals). Nothing here draws or computes statistics.

The rest of the package imports from here what it reads a search with; each piece has its
own module: ``_cli`` (``AnalysisError``, stdout, progress lines), ``_tracking`` (the
tracking store opened, runs looked up) and ``_searched`` (which parameters were searched).
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from mlflow.entities import Run
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from analysis._cli import AnalysisError, Progress, print_out, progress_printer, silent
from analysis._searched import (
    CATEGORICAL,
    CONTINUOUS,
    FAMILY,
    Searched,
    searched_parameters,
    space_params,
)
from analysis._tracking import (
    MLFLOW_TABLES,
    OPTUNA_TABLES,
    all_runs,
    check_own_artifacts,
    check_sqlite_file,
    experiment_id,
    find_run,
    latest_experiment,
    open_client,
    sqlite_path,
    tracking_uri_for,
    trial_label,
)
from analysis.reference import OFFICIAL_LABELS, OFFICIAL_PAIRS
from gridsearch import OUTCOME_TAG, ROLE_SEARCH, ROLE_TAG, ROLE_TRIAL
from trainables import names
from trainables.config import applicable
from trainables.presets import family_of

__all__ = [
    "CATEGORICAL",
    "CONTINUOUS",
    "FAMILY",
    "HISTORY_KEYS",
    "MLFLOW_TABLES",
    "OPTUNA_TABLES",
    "AnalysisError",
    "Progress",
    "SearchRecord",
    "Searched",
    "all_runs",
    "check_own_artifacts",
    "check_sqlite_file",
    "experiment_id",
    "find_run",
    "latest_experiment",
    "load_search",
    "open_client",
    "print_out",
    "progress_printer",
    "searched_parameters",
    "silent",
    "sqlite_path",
    "tracking_uri_for",
    "trial_label",
]

logger = logging.getLogger(__name__)

# The per-epoch metrics read back for every trial: the two curves and the semantic
# score's parts (for its interval at the best epoch).
HISTORY_KEYS = (
    names.PRIMARY_RETRIEVAL,
    names.PRIMARY_SEMANTIC,
    *(names.key(names.DEV, part) for part in names.DEV_SEMANTIC_PARTS),
    names.key(names.TEST, "r10_mean"),
    names.key(names.TEST, "semantic"),
    names.LOSS,
    names.ATTENTION_PENALTY,  # only multi-head runs with a penalty log it
)


@dataclass(frozen=True)
class SearchRecord:
    experiment: str
    tracking_uri: str
    parent_run_id: str | None  # the search's run (search.role=search), if there is one
    parent_params: dict[str, str]
    trials: pd.DataFrame  # one row per trial run: ids, outcome, params, final metrics
    history: pd.DataFrame  # one row per (trial_id, epoch): HISTORY_KEYS
    param_kinds: dict[str, str]  # searched parameter -> CONTINUOUS or CATEGORICAL
    dataset: str | None  # the store manifest's data set name, when the store is readable
    split_images: dict[str, int]  # images per split of the store ("val", "test")
    pair_counts: dict[str, int]  # semantic metric name (no split) -> pairs it was computed on
    semantic_labels: dict[str, tuple[str, str]]  # the same names -> (task, subtask), suite order
    notes: list[str] = field(default_factory=list)  # what could not be read, for the report
    # the store's char n-gram baselines (trainables.baselines), from the parent run's
    # baselines.json; empty for searches run with --no-baselines or before they existed
    baselines: dict[str, dict[str, float]] = field(default_factory=dict)
    # searched parameter -> the encoder families whose trials searched it (a parameter
    # not listed here: every trial's); see ``searched_parameters``
    searched_in: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def searched(self) -> list[str]:
        return list(self.param_kinds)

    def searched_by(self, param: str) -> pd.Series:
        """Which trials (rows of ``trials``) searched ``param``: those of the families
        that varied it (every trial for the family itself or a one-family search)."""
        families = self.searched_in.get(param)
        if families is None or FAMILY not in self.trials:
            return pd.Series(True, index=self.trials.index)
        return self.trials[FAMILY].isin(families)


def load_search(client: MlflowClient, uri: str, experiment: str) -> SearchRecord:
    """Read the search ``experiment``: its parent run, every trial run and their
    histories. Raises :class:`AnalysisError` when it has no trial runs."""
    runs = all_runs(client, [experiment_id(client, experiment)])
    parents = [r for r in runs if r.data.tags.get(ROLE_TAG) == ROLE_SEARCH]
    trial_runs = [r for r in runs if r.data.tags.get(ROLE_TAG) == ROLE_TRIAL]
    if not trial_runs:
        raise AnalysisError(
            f"experiment {experiment!r} holds no trial runs ({len(runs)} run(s), none "
            f"tagged {ROLE_TAG}=trial): is it a search written by `python -m gridsearch.run`?"
        )
    parent = parents[0] if parents else None
    notes = [] if parent else ["the search's parent run is missing: no data set facts"]
    params = dict(parent.data.params) if parent else {}
    trial_runs.sort(key=lambda r: r.info.start_time or 0)
    searched = searched_parameters(
        [r.data.params for r in trial_runs], space_params(params.get("space_definition"))
    )
    kinds = searched.kinds
    trials = pd.DataFrame([_trial_row(r, kinds) for r in trial_runs])
    history = _history(client, trial_runs)
    dataset, split_images = _store_facts(params.get("data"), notes)
    pair_counts, labels = _semantic_sets(params.get("senteval"), notes)
    baselines = _baselines(client, parent) if parent else {}
    return SearchRecord(
        experiment,
        uri,
        parent.info.run_id if parent else None,
        params,
        trials,
        history,
        kinds,
        dataset,
        split_images,
        pair_counts,
        labels,
        notes,
        baselines,
        searched.families,
    )


def _baselines(client: MlflowClient, parent: Run) -> dict[str, dict[str, float]]:
    """The parent run's ``baselines.json`` artifact (by baseline, metric -> value; null
    read as NaN); empty when it has none or it is not one."""
    with tempfile.TemporaryDirectory() as folder:
        try:
            local = client.download_artifacts(parent.info.run_id, names.BASELINES_FILE, folder)
            table = json.loads(Path(local).read_text(encoding="utf-8"))
            return {
                str(name): {str(k): math.nan if v is None else float(v) for k, v in metrics.items()}
                for name, metrics in table.items()
            }
        except (MlflowException, OSError, ValueError, TypeError, AttributeError) as err:
            logger.debug("no usable %s in the parent run (%s)", names.BASELINES_FILE, err)
            return {}


def _outcome(run: Run) -> str:
    """The tracker's outcome tag; a run still open has none yet."""
    if OUTCOME_TAG in run.data.tags:
        return run.data.tags[OUTCOME_TAG]
    return "running" if run.info.status == "RUNNING" else run.info.status.lower()


def _trial_row(run: Run, kinds: dict[str, str]) -> dict[str, Any]:
    row: dict[str, Any] = {
        "trial_id": trial_label(run),
        "run_id": run.info.run_id,
        "run_name": run.info.run_name,
        "outcome": _outcome(run),
    }
    encoder = run.data.params.get("encoder", "char_rnn")
    for name, kind in kinds.items():
        if name != FAMILY:  # a field the trial's family does not have: no value
            used = name in applicable({name: None}, encoder)
            row[name] = _typed(run.data.params.get(name) if used else None, kind)
    # how STS-B was scored, for the semantic table (runs before it existed: SentEval's)
    row["stsb_encoding"] = run.data.params.get("stsb_encoding", "senteval")
    row[FAMILY] = family_of(run.data.params)  # the report groups the trials by it
    row.update(run.data.metrics)  # the latest value of each: the final best, test/...
    return row


def _typed(value: str | None, kind: str) -> Any:
    if value is None:
        return math.nan if kind == CONTINUOUS else None
    if kind == CATEGORICAL:
        return value
    return int(value) if value.lstrip("-").isdigit() else float(value)


def _history(client: MlflowClient, runs: Iterable[Run]) -> pd.DataFrame:
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for run in runs:
        label = trial_label(run)
        for key in HISTORY_KEYS:
            if key not in run.data.metrics:
                continue
            for metric in sorted(client.get_metric_history(run.info.run_id, key), key=_when):
                row = rows.setdefault(
                    (label, metric.step), {"trial_id": label, "epoch": metric.step}
                )
                row[key] = metric.value  # the last logged value of an epoch wins
    frame = pd.DataFrame(list(rows.values()), columns=["trial_id", "epoch", *HISTORY_KEYS])
    return frame.sort_values(["trial_id", "epoch"], kind="stable").reset_index(drop=True)


def _when(metric: Any) -> tuple[int, int]:
    return metric.step, metric.timestamp


def _store_facts(data: str | None, notes: list[str]) -> tuple[str | None, dict[str, int]]:
    """The data set name and images per split from the search's store manifest."""
    if not data:
        return None, {}
    from storage import StoreError, open_store  # pyarrow: only when there is a store to read

    try:
        manifest = open_store(data).manifest
    # a bad manifest (StoreError), a store moved away or an unreachable URI (OSError), a
    # URI pyarrow cannot parse (ValueError)
    except (StoreError, OSError, ValueError) as err:
        notes.append(
            f"the search's data store {data} cannot be read here ({err}): no data set "
            "name, so no paper reference and no retrieval intervals"
        )
        return None, {}
    return manifest.dataset, {name: info.images for name, info in manifest.splits.items()}


def _semantic_sets(
    senteval: str | None, notes: list[str]
) -> tuple[dict[str, int], dict[str, tuple[str, str]]]:
    """Pairs behind each semantic correlation (for Fisher-z intervals) and its (task,
    subtask) label, read from the search's semantic sets; the official SentEval ones
    when they cannot be read."""
    counts, labels = dict(OFFICIAL_PAIRS), dict(OFFICIAL_LABELS)
    if not senteval or senteval == "null":
        return counts, labels
    from storage import StoreError
    from storage.senteval import load_senteval

    try:
        bench = load_senteval(senteval)
    except (StoreError, OSError) as err:
        notes.append(
            f"the search's semantic sets {senteval} cannot be read here ({err}): intervals "
            "use the official SentEval pair counts, where the metric is an official one"
        )
        return counts, labels
    total = 0
    for year, subtasks in bench.sts.items():
        year_total = sum(len(p) for p in subtasks.values())
        counts[f"{year.lower()}_pearson"] = year_total
        total += year_total
        for subtask, pairs in subtasks.items():
            key = names.subtask_key(year, subtask, "pearson")
            counts[key], labels[key] = len(pairs), (year, subtask)
    counts["sts12_16_pearson"] = total
    for task in bench.supervised.values():
        prefix = names.task_prefix(task.name)
        counts[f"{prefix}_pearson"] = counts[f"{prefix}_cosine_pearson"] = len(task.test)
        labels[f"{prefix}_pearson"] = (task.name, "test")
        labels[f"{prefix}_cosine_pearson"] = (task.name, "test, cosine")
        counts[names.key(names.DEV, f"{prefix}_cosine_pearson")] = len(task.dev)
    return counts, labels
