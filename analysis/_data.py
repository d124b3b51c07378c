"""A search read back from MLflow into data frames (the layout of gridsearch.tracking).

``load_search(client, experiment)`` returns a :class:`SearchRecord`: one row per trial
(its searched parameters and final metrics), the per-epoch history of the metrics the
curves need, and what the search's data store and semantic sets say about sample
sizes (for the intervals). Nothing here draws or computes statistics.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TextIO

import pandas as pd
from mlflow.entities import Run
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from analysis.reference import OFFICIAL_LABELS, OFFICIAL_PAIRS
from gridsearch import (
    OUTCOME_TAG,
    ROLE_SEARCH,
    ROLE_TAG,
    ROLE_TRIAL,
    TRIAL_TAG,
    RunsLayout,
    TrackingError,
    check_reachable,
    latest_search,
)
from storage.cli import error_line
from trainables import names
from trainables.config import applicable
from trainables.presets import family_of

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
CONTINUOUS, CATEGORICAL = "continuous", "categorical"
FAMILY = "family"  # the trials' column: trainables.presets.family_of of the run's params
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


class AnalysisError(Exception):
    """Bad input (an unknown experiment or run, nothing to analyse); the CLIs print it
    as ``error: ...`` and exit with status 2."""


def print_out(text: str) -> int:
    """Print ``text`` on stdout; 0, or 141 (as for SIGPIPE) when its reader has gone
    (``... | head``), without a traceback."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        with contextlib.suppress(OSError, ValueError):  # so that exit flushes no more
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return 0


# told what a long computation is doing, one short line at a time
Progress = Callable[[str], None]


def silent(_: str) -> None:
    """A :data:`Progress` that says nothing."""


def progress_printer(prog: str, quiet: bool, stream: TextIO | None = None) -> Progress:
    """What a long CLI is doing, one short line per step (``PROG: what``) on ``stream``
    (default stderr) when it is a terminal, so that minutes of work are not minutes of
    silence; nothing when ``quiet`` or when stderr goes to a file or a pipe (a script
    reads only the result and, on bad input, the one ``error:`` line)."""
    shown = not quiet and (stream or sys.stderr).isatty()

    def say(line: str) -> None:
        if shown:
            print(f"{prog}: {line}", file=stream or sys.stderr, flush=True)

    return say


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
        [r.data.params for r in trial_runs], _space_params(params.get("space_definition"))
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


def trial_label(run: Run) -> str:
    return run.data.tags.get(TRIAL_TAG) or run.info.run_name or run.info.run_id


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


class Searched(NamedTuple):
    kinds: dict[str, str]  # searched parameter -> CONTINUOUS or CATEGORICAL, in order
    families: dict[str, tuple[str, ...]]  # parameter -> the families that searched it


def _space_params(space_definition: str | None) -> dict[str, Any]:
    """The parameters the space defines (its Optuna distributions), by name."""
    if not space_definition:
        return {}
    try:
        return dict(json.loads(space_definition).get("params", {}))
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
        logger.warning("unreadable space_definition parameter; ignored")
        return {}


def searched_parameters(
    configs: Sequence[Mapping[str, str]], defined: Mapping[str, Any] | None = None
) -> Searched:
    """What a search searched, from its trials' logged configurations (TrainConfig keys,
    MLflow's strings) and the parameters its space defines (``defined``).

    Trials are grouped by encoder family (``trainables.presets.family_of``). With more
    than one family the family is searched (categorical). A field is searched in a
    family when its values differ among that family's trials and the family has it
    (``trainables.config.applicable``): a value a preset fixes differs between families
    only, and a field a family does not have (``hidden_size`` on ``word_bow``) only
    carries its default there, so neither counts. With one family and nothing that
    varies (a single trial) the fields the space defines are listed. A space's helper
    parameters (``search.<name>``, e.g. paper_grid's variant) are left out: the space
    decodes them into TrainConfig keys, which are shown instead."""
    defined = dict(defined or {})
    groups: dict[str, list[Mapping[str, str]]] = {}
    for config in configs:
        groups.setdefault(family_of(config), []).append(config)
    values: dict[str, dict[str, set[str]]] = {}  # field -> family -> its values there
    for family, members in groups.items():
        for config in members:
            encoder = config.get("encoder", "char_rnn")
            for name, value in config.items():
                if not name.startswith("search.") and name in applicable({name: 0}, encoder):
                    values.setdefault(name, {}).setdefault(family, set()).add(value)
    families = {
        name: tuple(f for f in groups if len(by_family.get(f, ())) > 1)
        for name, by_family in values.items()
    }
    varying = [n for n, f in families.items() if f]
    if not varying and len(groups) == 1:
        varying = [n for n in values if n in defined]
        families = {n: tuple(groups) for n in varying}
    order = {n: i for i, n in enumerate(defined)}
    varying.sort(key=lambda n: (order.get(n, len(order)), n))
    kinds: dict[str, str] = {FAMILY: CATEGORICAL} if len(groups) > 1 else {}
    searched_in: dict[str, tuple[str, ...]] = {}
    for name in varying:
        seen = {v for f in families[name] for v in values[name][f]}
        numeric = all(_is_number(v) for v in seen)
        categorical = defined.get(name, {}).get("type") == "categorical" or not numeric
        kinds[name] = CATEGORICAL if categorical else CONTINUOUS
        if len(groups) > 1:
            searched_in[name] = families[name]
    return Searched(kinds, searched_in)


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


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


def find_run(client: MlflowClient, ref: str, experiment: str | None = None) -> Run:
    """The run ``ref`` names: a run id, else a ``tune.trial_id`` tag, else a run name
    (in ``experiment``, or in every experiment). Ambiguous or unknown: AnalysisError."""
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
    for where in (f"tags.`{TRIAL_TAG}`", "attributes.run_name"):
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


def _runs_named(client: MlflowClient, ids: list[str], field: str, value: str) -> list[Run]:
    """The runs whose ``field`` (a tag or the run name) is ``value``, whatever quotes
    ``value`` holds: MLflow's filter has no escape, so one with both kinds is matched
    here rather than in the query."""
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
