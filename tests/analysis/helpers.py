"""Building blocks for the analysis tests: a SearchRecord from plain lists, and a search
written into a real MLflow store in the layout of gridsearch.tracking (without Ray)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pandas as pd
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from analysis._data import HISTORY_KEYS, SearchRecord
from gridsearch import OUTCOME_TAG, PARENT_TAG, ROLE_TAG, TRIAL_TAG


def make_record(
    trials: Sequence[Mapping[str, Any]],
    history: Sequence[Mapping[str, Any]] = (),
    *,
    param_kinds: Mapping[str, str] | None = None,
    dataset: str | None = "synthetic",
    split_images: Mapping[str, int] | None = None,
    pair_counts: Mapping[str, int] | None = None,
    semantic_labels: Mapping[str, tuple[str, str]] | None = None,
    baselines: Mapping[str, dict[str, float]] | None = None,
) -> SearchRecord:
    """A record as load_search makes one: ``trials`` rows need ``trial_id``; history rows
    ``trial_id``, ``epoch`` and any of HISTORY_KEYS."""
    frame = pd.DataFrame([{"outcome": "finished", "run_id": "", **t} for t in trials])
    hist = pd.DataFrame(list(history), columns=["trial_id", "epoch", *HISTORY_KEYS])
    return SearchRecord(
        experiment="test",
        tracking_uri="sqlite:///nowhere/mlflow.db",
        parent_run_id=None,
        parent_params={},
        trials=frame,
        history=hist,
        param_kinds=dict(param_kinds or {}),
        dataset=dataset,
        split_images=dict(split_images or {}),
        pair_counts=dict(pair_counts or {}),
        semantic_labels=dict(semantic_labels or {}),
        baselines=dict(baselines or {}),
    )


def write_search(
    client: MlflowClient,
    artifacts: Path,
    experiment: str,
    trials: Sequence[Mapping[str, Any]],
    parent_params: Mapping[str, Any] | None = None,
) -> str:
    """A parent run and one run per trial. A trial is ``{"trial_id", "outcome",
    "params": {...}, "epochs": [{metric: value}, ...], "final": {metric: value}}``:
    ``epochs[e]`` is logged at step e, ``final`` at the last step. Returns the parent id."""
    experiment_id = client.create_experiment(
        experiment, artifact_location=(artifacts / experiment).as_uri()
    )
    space = {"params": {"margin": {"type": "float", "low": 0.05, "high": 0.5}}}
    params = {"space": "margin_sweep", "objective": "both", "space_definition": space}
    params.update(parent_params or {})
    parent = client.create_run(experiment_id, run_name=experiment, tags={ROLE_TAG: "search"})
    parent_id = parent.info.run_id
    client.log_batch(
        parent_id,
        params=[Param(k, v if isinstance(v, str) else json.dumps(v)) for k, v in params.items()],
    )
    for trial in trials:
        run = client.create_run(
            experiment_id,
            run_name=f"trial-{trial['trial_id']}",
            tags={PARENT_TAG: parent_id, ROLE_TAG: "trial", TRIAL_TAG: trial["trial_id"]},
        )
        run_id = run.info.run_id
        client.log_batch(run_id, params=[Param(k, str(v)) for k, v in trial["params"].items()])
        epochs = list(trial.get("epochs", []))
        metrics = [
            Metric(k, float(v), 0, e) for e, values in enumerate(epochs) for k, v in values.items()
        ]
        last = max(len(epochs) - 1, 0)
        metrics += [Metric(k, float(v), 0, last) for k, v in trial.get("final", {}).items()]
        if metrics:
            client.log_batch(run_id, metrics=metrics)
        if trial.get("outcome"):
            client.set_tag(run_id, OUTCOME_TAG, trial["outcome"])
            client.set_terminated(
                run_id, "FINISHED" if trial["outcome"] == "finished" else "KILLED"
            )
    client.set_terminated(parent_id, "FINISHED")
    return parent_id


class _Tables(HTMLParser):
    """The tables of a page, as rows of cell texts (header rows included)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self.tables:
            self.tables[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def html_tables(page: str) -> list[list[list[str]]]:
    """Every ``<table>`` of ``page``: a list of rows, each the texts of its cells."""
    parser = _Tables()
    parser.feed(page)
    return parser.tables
