"""The MLflow tracking store of a search: checked to answer before anything starts, the
experiment created once (several trials creating it at once would race) and marked for
MLflow's UI, and the search's parent run. MLflow only: no Ray, so ``analysis`` opens
stores the same way.

MLflow 3.17's UI opens an experiment on its GenAI pages unless its "Model training"
switch is on; the experiment's kind tag says what it is, and ``results_url`` is the link
that opens the runs table of a search directly: the switch set by the URL, and the
search's saved view (``results_view``: the trials alone, best first, their searched
parameters, objectives, test values and outcome as columns; the description above the
table links the search's own run)."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from gridsearch.settings import first_objective
from gridsearch.tracking._curves import TRIALS_ONLY, charts_url
from gridsearch.tracking._lineage import log_store_input
from gridsearch.tracking._tags import (
    CHARTS_VIEW,
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    OUTCOME_RUNNING,
    OUTCOME_TAG,
    RESULTS_VIEW,
    ROLE_SEARCH,
    ROLE_TAG,
    VIEW_TAG_PREFIX,
)
from storage.cli import error_line
from trainables import names

__all__ = [
    "RESULT_METRICS",
    "TrackingError",
    "check_reachable",
    "ensure_experiment",
    "forget_database",
    "log_metrics",
    "objective_metrics",
    "param_value",
    "parent_name",
    "reading_guide",
    "results_link",
    "results_url",
    "results_view",
    "start_parent_run",
    "using_tracking_uri",
]

PARAM_LIMIT = 6000  # MLflow's limit on a parameter value, in characters
BATCH_LIMIT = 1000  # MLflow's limit on metrics per log_batch call
LOCAL_UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves a local store by default
# The columns of the results view after the two objectives: the test values of the
# ensemble (finished trials) and of the last epoch's model (every trial), and the epoch a
# trial got to.
RESULT_METRICS = (
    names.FINISHED,
    names.key(names.ENSEMBLE, "semantic"),
    names.key(names.TEST, "r10_mean"),
    "epoch",
)

# the runs table's column ids (MLflow 3.17's UI) of the run's name, when it started, how long
RUN_NAME_COLUMN = "attributes.`Run Name`"
TIME_COLUMNS = ("runDateAndNestInfo", "duration")
RUN_NAME_WIDTH = 250  # pixels: trial-<id> and a margin, lr_max or family; the UI's is 190
GUIDE_MARK = "**Reading these runs:**"  # a description this module wrote starts so
PARENT_MARK = "[search]"
DESCRIPTION_TAG = "mlflow.note.content"  # MLflow's: an experiment's description


class TrackingError(RuntimeError):
    """The tracking store cannot be used; raised before any trial starts."""


def check_reachable(uri: str) -> MlflowClient:
    """A client for ``uri``, failing now, before any trial, when the store does not
    answer; MLflow's remembered artifact stores of earlier runs are forgotten first
    (``forget_artifact_stores``)."""
    forget_artifact_stores()
    if uri.startswith(("http://", "https://")):
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    client = MlflowClient(tracking_uri=uri)
    try:
        client.search_experiments(max_results=1)
    except Exception as err:  # MLflow raises many kinds for a dead server or a bad URI
        raise TrackingError(
            f"--tracking-uri {uri}: the MLflow tracking store cannot be used ({error_line(err)})"
        ) from None
    return client


def forget_artifact_stores() -> None:
    """Forget the artifact store MLflow remembers for each run it wrote or read in this
    process. MLflow 3.17 keeps them by run id alone, whatever tracking store the run is in
    (``mlflow.tracking._tracking_service.utils._artifact_repos_cache``; no public call
    clears it), and a copied runs directory holds the same run ids as its original: a
    search resumed, or a report read, after another copy's in one process (a notebook,
    ``gridsearch.run.main`` called twice) would write into, or read from, the other
    copy's artifacts."""
    from mlflow.tracking._tracking_service import utils

    utils._artifact_repos_cache.clear()


def forget_database(path: Path) -> None:
    """Close the connections MLflow keeps open to the sqlite file at ``path`` (its stores
    keep an engine per database URL, ``SqlAlchemyStore._engine_map``; no public call closes
    them): once the file is replaced (a relocation writes a rebased copy in its place),
    they would read the old file, and write into nothing ("a readonly database"). The
    next use opens the file there now."""
    from mlflow.store.model_registry.sqlalchemy_store import SqlAlchemyStore as Registry
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore as Tracking

    target = os.path.realpath(path)
    for store in (Tracking, Registry):
        for engine in list(store._engine_map.values()):
            database = engine.url.database
            if database and os.path.realpath(database) == target:
                engine.dispose()


def ensure_experiment(client: MlflowClient, experiment: str, artifact_root: Path) -> str:
    """Create the experiment once, here, before any trial; reuse it when it exists.
    Returns its id. With a local store the artifacts go under ``artifact_root``; an
    MLflow server keeps them where it was told (``--artifacts-destination``, proxied to
    every client)."""
    found = client.get_experiment_by_name(experiment)
    if found is not None:
        experiment_id = str(found.experiment_id)
    elif client.tracking_uri.startswith(("http://", "https://")):
        experiment_id = str(client.create_experiment(experiment))
    else:
        location = (artifact_root.resolve() / experiment).as_uri()
        experiment_id = str(client.create_experiment(experiment, artifact_location=location))
    # also on --resume, so that searches recorded before the tag existed get it
    client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return experiment_id


def start_parent_run(
    client: MlflowClient,
    experiment_id: str,
    name: str,
    params: Mapping[str, Any],
    tags: Mapping[str, str],
    artifacts: Mapping[str, Any],
) -> str:
    """The search's run (``ROLE_TAG`` = ``ROLE_SEARCH``), named ``parent_name(name)``,
    reused when it is resumed; ``artifacts`` are written as JSON files. Also (again on
    resume) the experiment's results view, which lists the trials alone, and the
    description that says how to read it and links the search's own run, from
    ``params["objective"]`` and ``params["searched"]``."""
    objective = str(params.get("objective", "retrieval"))
    view = results_view(objective, params.get("searched", ()))
    client.set_experiment_tag(experiment_id, VIEW_TAG_PREFIX + RESULTS_VIEW, view)
    run_id = _parent_run(client, experiment_id, name, params, tags, artifacts)
    _describe(client, experiment_id, name, objective, run_id)
    return run_id


def _parent_run(
    client: MlflowClient,
    experiment_id: str,
    name: str,
    params: Mapping[str, Any],
    tags: Mapping[str, str],
    artifacts: Mapping[str, Any],
) -> str:
    existing = client.search_runs(
        [experiment_id], f"tags.`{ROLE_TAG}` = '{ROLE_SEARCH}'", max_results=1
    )
    if existing:
        run_id = existing[0].info.run_id
        client.set_tag(run_id, OUTCOME_TAG, OUTCOME_RUNNING)
        client.update_run(run_id, status="RUNNING")
        client.set_tag(run_id, "resumed_at", time.strftime("%Y-%m-%d %H:%M:%S"))
        return str(run_id)
    own = {ROLE_TAG: ROLE_SEARCH, OUTCOME_TAG: OUTCOME_RUNNING}
    run = client.create_run(experiment_id, run_name=parent_name(name), tags={**own, **tags})
    client.log_batch(run.info.run_id, params=[Param(k, param_value(v)) for k, v in params.items()])
    with tempfile.TemporaryDirectory() as folder:
        for filename, content in artifacts.items():
            Path(folder, filename).write_text(json.dumps(content, indent=2, default=str))
        client.log_artifacts(run.info.run_id, folder)
    if "data" in params:  # the feature store, as the run's dataset input (lineage)
        log_store_input(client, run.info.run_id, str(params["data"]))
    return str(run.info.run_id)


def parent_name(experiment: str) -> str:
    """The search's own run's name: its row is the search, not a trial."""
    return f"{PARENT_MARK} {experiment}"


def reading_guide(
    experiment: str, objective: str, experiment_id: str = "", parent_run_id: str = ""
) -> str:
    """How to read a search's runs table (Markdown): the metric it selects on and the one
    it reports first, named as such, and where the search's own run is (linked, given
    the ids)."""
    selected = objective_metrics(objective)
    if objective == "both":
        on = f"`{selected[0]}` and `{selected[1]}` together (their Pareto front)"
    else:
        on = f"`{selected[0]}`"
    own = f"`{parent_name(experiment)}`"
    if experiment_id and parent_run_id:
        own = f"[{parent_name(experiment)}](#/experiments/{experiment_id}/runs/{parent_run_id})"
    return (
        f"{GUIDE_MARK} **Selected on: {on}**; **Reported first: `{names.FINISHED}`**; "
        f"the rows are the trials; the search's own run is {own}.\n\n"
        f"Selected on: each trial's best over its epochs of a dev metric (dev data only: "
        f"`dev/r10_mean` is the dev R@10 mean, `dev/semantic` the dev semantic score); the "
        f"table is sorted by `{selected[0]}`, best first. Reported first: the test R@10 mean "
        f"of the trial's snapshot ensemble (test data: reported, never selected on); "
        f"`{names.key(names.TEST, 'r10_mean')}` is its last epoch's model on the same test "
        "split. Each row is a trial, named by what it tried, its searched parameters in the "
        f"first columns and its colour the same in every chart. The search's own run, {own}, "
        "holds its configuration, its summary and its best trials' values (its "
        "`best_trial.<metric>` tags name them); clearing the search box lists it with the "
        "trials. The Chart view draws each trial's trade-off epoch by epoch."
    )


def _describe(
    client: MlflowClient, experiment_id: str, name: str, objective: str, parent_run_id: str
) -> None:
    """The experiment's description (shown above its runs) set to ``reading_guide``,
    unless someone wrote their own."""
    found = client.get_experiment(experiment_id).tags.get(DESCRIPTION_TAG)
    if found is None or found.startswith(GUIDE_MARK):
        guide = reading_guide(name, objective, experiment_id, parent_run_id)
        client.set_experiment_tag(experiment_id, DESCRIPTION_TAG, guide)


def param_value(value: Any) -> str:
    """A parameter as MLflow stores it: strings as they are, the rest as JSON, cut to
    MLflow's limit."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:PARAM_LIMIT]


def log_metrics(client: MlflowClient, run_id: str, values: Mapping[str, float], step: int) -> None:
    """``values`` logged into the run at ``step``, with one timestamp, in as few calls as
    MLflow's limit per call allows."""
    stamp = int(time.time() * 1000)
    metrics = [Metric(k, v, stamp, step) for k, v in values.items()]
    for start in range(0, len(metrics), BATCH_LIMIT):
        client.log_batch(run_id, metrics=metrics[start : start + BATCH_LIMIT])


def objective_metrics(objective: str) -> tuple[str, ...]:
    """Both objective metrics (``dev/..._best``), the search's own first (for ``both``,
    retrieval's: the paper's selection)."""
    first = first_objective(objective)[0]
    return (first, *(m for m in (names.BEST_RETRIEVAL, names.BEST_SEMANTIC) if m != first))


def results_view(objective: str, searched: Sequence[str]) -> str:
    """The saved runs-table view of a search, as the value of its experiment tag (the
    envelope and state of MLflow 3.17's saved views): the trials alone (``TRIALS_ONLY``:
    the search's own run would sort among them, showing the best values of two trials as
    one row), flat and sorted by the search's objective, best first; columns: the run's
    name, then what it tried and how it ended (the ``searched`` parameters and the outcome
    tag, first, so that a window of 1,600 pixels shows them beside MLflow's assistant),
    ``objective_metrics`` and ``RESULT_METRICS``, then when it ran and for how long."""
    metrics = [*objective_metrics(objective), *RESULT_METRICS]
    columns = [
        *(f"params.`{p}`" for p in searched),
        f"tags.`{OUTCOME_TAG}`",
        *(f"metrics.`{m}`" for m in metrics),
    ]
    state = {
        "searchFilter": TRIALS_ONLY,
        "orderByKey": f"metrics.`{metrics[0]}`",
        "orderByAsc": False,
        "selectedColumns": columns,
        # the UI groups columns by kind (metrics, parameters, tags) unless told an order
        "columnOrder": [RUN_NAME_COLUMN, *columns, *TIME_COLUMNS],
        "columnWidths": {RUN_NAME_COLUMN: RUN_NAME_WIDTH},  # what it tried, not cut
    }
    now = int(time.time() * 1000)
    envelope = {"name": "search results", "createdAt": now, "updatedAt": now}
    return json.dumps({**envelope, "state": json.dumps(state)})


def results_url(experiment_id: str, ui: str = LOCAL_UI) -> str:
    """The MLflow UI's page of a search: its runs table in the "Model training" view,
    through the search's results view."""
    query = f"workflowType=machine_learning&viewStateShareKey={RESULTS_VIEW}"
    return f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"


def results_link(tracking_uri: str, experiment: str, charts: bool = False) -> str | None:
    """``results_url`` of ``experiment`` (with ``charts``: the page opened on its chart
    view, ``_curves.charts_url``), served by the tracking server itself or, for a local
    store, by ``mlflow ui`` at its default address; None when it cannot be found."""
    try:
        found = MlflowClient(tracking_uri=tracking_uri).get_experiment_by_name(experiment)
    except Exception:  # MLflow raises many kinds for a store that is away
        return None
    if found is None:
        return None
    remote = tracking_uri.startswith(("http://", "https://"))
    ui = tracking_uri if remote else LOCAL_UI
    if charts:
        return charts_url(str(found.experiment_id), ui, CHARTS_VIEW)
    return results_url(str(found.experiment_id), ui)


@contextmanager
def using_tracking_uri(uri: str) -> Iterator[None]:
    """MLflow's process-wide tracking URI (and so its registry's) set to ``uri``, and its
    per-file download bars off, then all put back as they were. MLflow 3.17 reads only
    that URI where ``log_model`` links a model and where ``models:/NAME@ALIAS`` is looked
    up (``ModelsArtifactRepository._get_model_uri_infos``), whatever a call is told."""
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    bar = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
    keys = ("MLFLOW_REGISTRY_URI", "MLFLOW_TRACKING_URI", bar)
    saved = {key: os.environ.get(key) for key in keys}
    os.environ.pop("MLFLOW_REGISTRY_URI", None)  # the registry follows the tracking URI
    os.environ[bar] = "false"
    try:
        with _use_tracking_uri(uri):
            yield
    finally:  # putting back an unset URI unsets the variable, which may have been set
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
