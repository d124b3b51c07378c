"""The tracking store opened for reading (checked first: MLflow would create a missing
or empty store) and the runs looked up in it: an experiment's, one named by a run id,
trial id or run name, and the search that started last in a runs directory."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
from pathlib import Path
from urllib.parse import unquote, urlparse

from mlflow.entities import Run
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from analysis._cli import AnalysisError
from gridsearch import TRIAL_TAG, RunsLayout, TrackingError, check_reachable, latest_search
from storage.cli import error_line

__all__ = [
    "MLFLOW_TABLES",
    "OPTUNA_TABLES",
    "all_runs",
    "check_own_artifacts",
    "check_sqlite_file",
    "experiment_id",
    "find_run",
    "latest_experiment",
    "open_client",
    "sqlite_path",
    "tracking_uri_for",
    "trial_label",
]

logger = logging.getLogger(__name__)

# the tables that make an SQLite file an MLflow tracking store or an Optuna study
MLFLOW_TABLES = ("experiments", "runs", "alembic_version")
OPTUNA_TABLES = ("studies", "trials")
_SQLITE_HEADER = b"SQLite format 3\x00"
# URI schemes MLflow's own tracking stores take; another one may still be a plugin's
_KNOWN_SCHEMES = ("", "file", "sqlite", "http", "https", "postgresql", "mysql", "mssql")
# Worded for every CLI that reads a store (each has its own flags for it: see its --help)
_STORE_HINT = (
    "point the command at the search's tracking store, the mlflow.db of its runs directory "
    "or its MLflow server; --help names the flags"
)


def tracking_uri_for(tracking_uri: str | None, runs_dir: str | os.PathLike[str]) -> str:
    """``--tracking-uri`` if given, else the search's default: sqlite in ``runs_dir``."""
    if tracking_uri is not None and not tracking_uri.strip():
        raise AnalysisError("--tracking-uri: got an empty string, expected a tracking URI")
    return tracking_uri or RunsLayout.at(runs_dir).tracking_uri


def sqlite_path(uri: str) -> Path | None:
    """The file of an ``sqlite:///FILE`` URI (relative or, with a fourth slash, absolute)."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri.removeprefix("sqlite:///").split("?", 1)[0])


def check_sqlite_file(path: Path, what: str, tables: tuple[str, ...], kind: str) -> None:
    """``path`` is an SQLite database holding ``tables`` (a ``kind``), checked by reading
    only: MLflow and Optuna would write their schema into an empty or foreign file."""
    if path.is_dir():
        raise AnalysisError(f"{what}: {path} is a directory, expected the {kind}'s file")
    if not path.exists():
        raise AnalysisError(f"{what}: {path} does not exist")
    try:
        with path.open("rb") as handle:
            head = handle.read(len(_SQLITE_HEADER))
    except OSError as err:
        raise AnalysisError(f"{what}: {path} cannot be read ({err.strerror or err})") from None
    if not head:
        raise AnalysisError(f"{what}: {path} is an empty file (0 bytes), not an {kind}")
    if head != _SQLITE_HEADER:
        raise AnalysisError(f"{what}: {path} is not an SQLite database, so not an {kind}")
    try:
        with contextlib.closing(
            sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        ) as db:
            found = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    except sqlite3.Error as err:
        raise AnalysisError(f"{what}: {path} is damaged or locked ({err})") from None
    missing = [t for t in tables if t not in found]
    if missing:
        raise AnalysisError(
            f"{what}: {path} is an SQLite database without the tables of an {kind} "
            f"({', '.join(missing)})"
        )


def open_client(uri: str) -> MlflowClient:
    """A client for ``uri``, which must answer. A local store must already exist and be
    one (checked without writing: MLflow would create a missing or empty sqlite file)."""
    what = f"tracking store {uri}"
    path = sqlite_path(uri)
    if path is not None:
        if not path.exists():
            raise AnalysisError(f"{what}: {path} does not exist ({_STORE_HINT})")
        check_sqlite_file(path, what, MLFLOW_TABLES, "MLflow tracking store")
    scheme = uri.split("://", 1)[0].split("+", 1)[0] if "://" in uri else ""
    local = scheme == "file" or (scheme == "" and not uri.startswith("databricks"))
    if local and not Path(uri.removeprefix("file://")).is_dir():  # MLflow would create it
        raise AnalysisError(f"{what}: no such folder ({_STORE_HINT})")
    try:
        return check_reachable(uri)
    except TrackingError as err:
        raise AnalysisError(str(err)) from None
    except Exception as err:  # the client's constructor raises many kinds for a bad URI
        if scheme not in _KNOWN_SCHEMES:
            raise AnalysisError(
                f"{what}: unknown URI scheme {scheme!r}; expected sqlite:///FILE, "
                "http(s)://HOST[:PORT] or a database URL MLflow takes"
            ) from None
        raise AnalysisError(f"{what}: MLflow cannot use it ({error_line(err)})") from None


def experiment_id(client: MlflowClient, experiment: str) -> str:
    found = client.get_experiment_by_name(experiment)
    if found is None:
        known = sorted(e.name for e in client.search_experiments() if e.name != "Default")
        raise AnalysisError(
            f"--experiment {experiment!r}: no such MLflow experiment in this tracking "
            f"store; there are: {', '.join(known) if known else '(none)'}"
        )
    return str(found.experiment_id)


def all_runs(client: MlflowClient, experiment_ids: list[str], query: str = "") -> list[Run]:
    runs: list[Run] = []
    token = None
    while True:
        try:
            page = client.search_runs(experiment_ids, query, max_results=1000, page_token=token)
        except MlflowException as err:
            raise AnalysisError(f"searching the runs failed ({error_line(err)})") from None
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def trial_label(run: Run) -> str:
    return run.data.tags.get(TRIAL_TAG) or run.info.run_name or run.info.run_id


def find_run(client: MlflowClient, ref: str, experiment: str | None = None) -> Run:
    """The run ``ref`` names: a run id, else a ``tune.trial_id`` tag, else a run name or
    its first word (``trial-3f2a91c0``) (in ``experiment``, or in every experiment).
    Ambiguous or unknown: AnalysisError."""
    if re.fullmatch(r"[0-9a-f]{32}", ref):
        try:
            return client.get_run(ref)
        except MlflowException as err:  # not a run id after all: try it as a trial id or name
            logger.debug("%s is not a run id here (%s); trying it as a trial id or name", ref, err)
    ids = (
        [experiment_id(client, experiment)]
        if experiment
        else [e.experiment_id for e in client.search_experiments()]
    )
    for where in (f"tags.`{TRIAL_TAG}`", "attributes.run_name", _NAMED_FIRST):
        found = _runs_named(client, ids, where, ref)
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            listed = ", ".join(
                f"{r.info.run_id} (experiment {r.info.experiment_id})" for r in found
            )
            raise AnalysisError(
                f"{ref!r} names {len(found)} runs: {listed}; pass a run id or --experiment"
            )
    raise AnalysisError(
        f"{ref!r}: no MLflow run has that run id, {TRIAL_TAG} tag or run name "
        f"(searched {len(ids)} experiment(s)); `mlflow ui` lists them"
    )


# a run whose name starts with the reference and a space: a trial's run is named
# ``trial-<id>`` and what it tried (``trial-3f2a91c0 margin=0.1625``)
_NAMED_FIRST = "run name first word"


def _runs_named(client: MlflowClient, ids: list[str], field: str, value: str) -> list[Run]:
    """The runs whose ``field`` (a tag or the run name) is ``value``, whatever quotes
    ``value`` holds: MLflow's filter has no escape, so one with both kinds is matched
    here rather than in the query. ``_NAMED_FIRST``: the runs whose name's first word is
    ``value``."""
    if field == _NAMED_FIRST:
        return [r for r in all_runs(client, ids) if (r.info.run_name or "").split(" ")[0] == value]
    for quote in ("'", '"'):
        if quote not in value:
            return all_runs(client, ids, f"{field} = {quote}{value}{quote}")
    if field == "attributes.run_name":
        return [r for r in all_runs(client, ids) if r.info.run_name == value]
    return [r for r in all_runs(client, ids) if r.data.tags.get(TRIAL_TAG) == value]


def latest_experiment(runs_dir: str | os.PathLike[str]) -> tuple[str, float]:
    """The experiment name and start time of the search that started last in
    ``runs_dir`` (by its record); AnalysisError when it holds none."""
    found = latest_search(RunsLayout.at(runs_dir))
    if found is None:
        raise AnalysisError(
            f"--runs-dir {runs_dir}: holds no search (no record in "
            f"{RunsLayout.at(runs_dir).record('NAME').parent}); pass --runs-dir of a search "
            "or --experiment NAME"
        )
    return found


_ARTIFACTS = "mlartifacts"  # the runs directory's artifacts folder, beside mlflow.db


def check_own_artifacts(tracking_uri: str, location: str, what: str) -> None:
    """``AnalysisError`` when the tracking store at ``tracking_uri`` (an sqlite file in a
    runs directory) keeps ``location`` (an artifact location it records) in *another*
    runs directory that holds the same files as this one: a runs directory copied (or
    moved) and not resumed since, whose store still names where it was copied from. Read
    from there, the model would be the original's, not the copy's."""
    store = sqlite_path(tracking_uri)
    if store is None:
        return
    here = Path(os.path.realpath(store.parent))
    path = (
        Path(unquote(urlparse(location).path)) if location.startswith("file:") else Path(location)
    )
    if not path.is_absolute() or _ARTIFACTS not in path.parts:
        return
    cut = len(path.parts) - 1 - path.parts[::-1].index(_ARTIFACTS)
    there = Path(*path.parts[:cut])
    if Path(os.path.realpath(there)) == here:
        return
    copy = here.joinpath(*path.parts[cut:])
    if copy.exists():
        raise AnalysisError(
            f"{what}: its artifacts are in {there}, not in {here} (whose store this is): "
            f"{here} is a copy or move of {there} not resumed since, and what it names is "
            f"{there}'s; resume its search once in {here} (python -m gridsearch.run "
            f"--experiment NAME --resume --runs-dir {here}: a finished search only takes "
            f"the move in), or give {there}'s store"
        )
