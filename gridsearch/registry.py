"""A search's best models in the MLflow Model Registry, as models that embed sentences.

At the end of a search, ``register_best`` logs the snapshot ensemble of each chosen trial
as an MLflow pyfunc model into that trial's run and registers it under one name per
search space, ``grounded-<space>``, with aliases:

- ``best-retrieval``: the finished trial with the best dev R@10 mean (``dev/r10_mean_best``);
- ``best-semantic``: the finished trial with the best dev semantic score;
- ``pareto-1`` .. ``pareto-K`` (``--objective both``): the finished trials on the Pareto
  front of the two, by dev R@10 mean, best first.

The trials are chosen as the search's summary chooses them (``summary.best_trial``,
``summary.pareto_front``: dev values only), among the trials whose outcome is
``finished``. A trial chosen twice is one model version with both aliases. Each version
is tagged with its trial, run, experiment, what it was chosen as among its search's
trials (``chosen_in_search``), its dev and test values, and its search's lineage: the
store's manifest digest (``data_manifest_sha256``), the semantic sets
(``semantic_sets``), the ``objective`` and whether it was a ``--smoke-test``.

Every search registers its versions; an alias names the best among comparable models,
so a version takes it only where:

- no version holds it yet, or the one that does is this search's own (a search that
  ends again, ``--resume``, points it at its new versions);
- the one that holds it is a ``--smoke-test``'s and this search is not (a smoke test
  checks the path: its models never replace a search's, a search's replace its);
- the two searches are comparable (the same store, semantic sets and objective) and
  this search's dev value is better (``best-*``), or its models are on the Pareto front
  of both searches' models (``pareto-K``, which then name that front).

Otherwise the alias stays where it is, and a line says where and why (another store, a
worse dev value, ...). A version that loses an alias is tagged ``replaced`` (to which
version, and why); one that did not get an alias it was chosen for, ``not_aliased``
(where it stays, and why): the tags never claim more than what happened.

    import mlflow

    model = mlflow.pyfunc.load_model("models:/grounded-margin_sweep@best-retrieval")
    model.predict(["A small red circle.", "Two blue squares."])  # (2, dim) float32

The model each version serves, and how it takes and refuses sentences, is
``gridsearch._served``'s (``SentenceEncoderModel``); the rules by which a version takes
an alias, ``gridsearch._aliases``'. This module registers: the versions, the aliases
moved, the tags that say what happened.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import mlflow
import mlflow.artifacts
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, ErrorCode
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS

from gridsearch._aliases import (
    BEST_ALIASES,
    PARETO,
    SEMANTIC_TAG,
    SMOKE_TAG,
    STORE_TAG,
    Holder,
    Lineage,
    Registered,
    choose,
    decide,
    decide_front,
)
from gridsearch._served import INPUT_COLUMN, SentenceEncoderModel, log_encoder, requirements
from gridsearch._space_file import SPACE_NAME
from gridsearch.summary import TrialOutcome, without_password
from gridsearch.tracking import ROLE_SEARCH, ROLE_TAG, TRIAL_TAG, using_tracking_uri
from storage.cli import error_line
from trainables import names
from trainables.checkpoint import ENSEMBLE_FILE

__all__ = [
    "BEST_ALIASES",
    "INPUT_COLUMN",
    "Lineage",
    "SentenceEncoderModel",
    "choose",
    "log_encoder",
    "model_name",
    "register_best",
    "requirements",
]

_VALUE_TAGS = (
    names.BEST_RETRIEVAL,
    names.BEST_SEMANTIC,
    names.FINISHED,
    names.key(names.ENSEMBLE, "semantic"),
)

Write = Callable[[str], None]


def model_name(space: str) -> str:
    """The registered model of a search space: ``grounded-margin_sweep``. A space name
    that cannot name one (checked when a space file is read) is a ValueError."""
    if not SPACE_NAME.fullmatch(space):
        raise ValueError(f"space name {space[:60]!r}: cannot name a registered model")
    return f"grounded-{space}"


def register_best(
    outcomes: Sequence[TrialOutcome],
    *,
    tracking_uri: str,
    experiment: str,
    space: str,
    objective: str,
    write: Write,
    smoke_test: bool = False,
) -> dict[str, str]:
    """Register the trials ``choose`` picks, a version each, and point the aliases at
    those that are the best among comparable models (see the module docstring); returns
    alias -> version for the aliases this search's versions took. Where an alias stays,
    a line says where and why. A registry that fails (a tracking server away) is one
    ``warning:`` line to ``write`` and no alias moved: the search itself is all recorded
    already. ``smoke_test``: the search is a ``--smoke-test``."""
    picks = choose(outcomes, objective)
    if not picks:
        return {}
    name = model_name(space)
    try:
        search = _Search(tracking_uri, experiment, space, objective, smoke_test)
        registered = search.register(name, picks)
    except Exception as err:  # MLflow raises many kinds for a store that is away
        write(
            f"warning: the best models were not registered as {name!r} in "
            f"{without_password(tracking_uri)} ({error_line(err, 200)}); the search is "
            f"recorded all the same, every trial's {ENSEMBLE_FILE} in its run"
        )
        return {}
    for line in registered.lines(name, picks):
        write(line)
    return registered.taken


_CHOSEN_TAG = "chosen_in_search"  # what a version was chosen as among its search's trials
_REPLACED_TAG = "replaced"  # on a version: the aliases it lost, to which version and why
_NOT_ALIASED_TAG = "not_aliased"  # on a version: the aliases it was chosen for but did not get
_TAG_LIMIT = 5000  # characters of a version tag kept (its end)


class _Search:
    """One search's experiment, as the registry sees it."""

    def __init__(
        self, tracking_uri: str, experiment: str, space: str, objective: str, smoke_test: bool
    ) -> None:
        self.uri, self.experiment = tracking_uri, experiment
        self.space, self.objective, self.smoke_test = space, objective, smoke_test
        self.client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)

    def register(self, name: str, picks: Mapping[str, TrialOutcome]) -> Registered:
        """A new version per picked trial; then each alias pointed at its version where
        that is the best among comparable models (``_verdict``), and the versions that
        lost one, or did not get one they were chosen for, tagged with where and why."""
        found = self.client.get_experiment_by_name(self.experiment)
        if found is None:
            raise LookupError(f"no MLflow experiment {self.experiment!r}")
        lineage = self._lineage(found.experiment_id, self.smoke_test)
        self._ensure_model(name)
        by_trial: dict[str, list[str]] = {}
        for alias, outcome in picks.items():
            by_trial.setdefault(outcome.trial_id, []).append(alias)
        versions: dict[str, str] = {}
        with using_tracking_uri(self.uri), tempfile.TemporaryDirectory() as folder:
            for aliases in by_trial.values():
                outcome = picks[aliases[0]]
                version = self._version(
                    name, found.experiment_id, outcome, aliases, folder, lineage
                )
                versions.update(dict.fromkeys(aliases, version))
        held = dict(self.client.get_registered_model(name).aliases)
        registered = Registered(versions)
        holder_of = functools.partial(self._holder, name)
        for alias in (a for a in versions if a in BEST_ALIASES):
            decide(alias, lineage, picks, held, registered, holder_of)
        decide_front(
            lineage,
            picks,
            held,
            registered,
            holder_of,
            lambda version: self.client.get_model_version(name, version).tags,
        )
        for alias, version in registered.taken.items():
            if held.get(alias) != version:
                self.client.set_registered_model_alias(name, alias, version)
        self._tag_changes(name, held, registered)
        return registered

    def _holder(self, name: str, version: str) -> Holder:
        """The version that holds an alias, with its search's lineage: its tags, else
        (a version registered before they were written) its search's parent run."""
        found = self.client.get_model_version(name, version)
        tags = dict(found.tags)
        experiment = tags.get("experiment", "?")
        if STORE_TAG in tags:
            lineage = Lineage(
                experiment,
                tags[STORE_TAG],
                tags.get(SEMANTIC_TAG, ""),
                tags.get("objective", ""),
                tags.get(SMOKE_TAG) == "true",
            )
        else:
            known = self.client.get_experiment_by_name(experiment)
            lineage = (
                self._lineage(known.experiment_id, False)
                if known is not None
                else Lineage(experiment, "", "", tags.get("objective", ""), False)
            )
            lineage = dataclasses.replace(
                lineage, objective=tags.get("objective", lineage.objective)
            )
        return Holder(str(found.version), tags, lineage)

    def _lineage(self, experiment_id: str, smoke_test: bool) -> Lineage:
        """A search's lineage from its parent run's parameters."""
        experiment = self.client.get_experiment(experiment_id).name
        runs = self.client.search_runs(
            [experiment_id], f"tags.`{ROLE_TAG}` = '{ROLE_SEARCH}'", max_results=1
        )
        params = dict(runs[0].data.params) if runs else {}
        data, senteval = params.get("data", ""), params.get("senteval", "null")
        if senteval in ("null", "None", ""):
            semantic = "none"
        elif data and (senteval == data or senteval.startswith(data.rstrip("/") + "/")):
            semantic = "the store's own"
        else:
            semantic = senteval
        return Lineage(
            experiment,
            params.get("data_manifest_sha256", ""),
            semantic,
            params.get("objective", self.objective),
            smoke_test,
        )

    def _tag_changes(self, name: str, held: Mapping[str, str], registered: Registered) -> None:
        """The versions that lost an alias say to which version and why; this search's
        versions that did not get an alias they were chosen for say where it stays. A
        pareto alias beyond a front that moved and is shorter now is removed."""
        lost: dict[str, list[str]] = {}
        for alias, before in held.items():
            now = registered.taken.get(alias)
            if alias.startswith(PARETO) and registered.front is not None:
                if now is None:
                    self.client.delete_registered_model_alias(name, alias)
                    lost.setdefault(before, []).append(f"{alias}: removed ({registered.front})")
                elif now != before:
                    lost.setdefault(before, []).append(
                        f"{alias}: to version {now} ({registered.front})"
                    )
            elif now is not None and now != before:
                lost.setdefault(before, []).append(
                    f"{alias}: to version {now} ({registered.notes.get(alias, '')})"
                )
        for version, said in lost.items():
            self._append_tag(name, version, _REPLACED_TAG, "; ".join(said))
        kept: dict[str, list[str]] = {}
        for alias, (where, why) in registered.kept.items():
            if alias in registered.versions:
                at = f"stays at version {where}" if where else "stays unset"
                kept.setdefault(registered.versions[alias], []).append(f"{alias} {at}: {why}")
        for version, said in kept.items():
            self._append_tag(name, version, _NOT_ALIASED_TAG, "; ".join(said))

    def _append_tag(self, name: str, version: str, key: str, text: str) -> None:
        before = self.client.get_model_version(name, version).tags.get(key)
        value = f"{before}; {text}" if before else text
        self.client.set_model_version_tag(name, version, key, value[-_TAG_LIMIT:])

    def _ensure_model(self, name: str) -> None:
        try:
            self.client.create_registered_model(
                name,
                tags={"space": self.space},
                description=f"Sentence encoders found by searches of the space {self.space!r} "
                "(gridsearch.run): aliases best-retrieval, best-semantic, pareto-K, each "
                "the best among comparable models (the same store, semantic sets and "
                "objective; a --smoke-test's never replace a search's).",
            )
        except MlflowException as err:
            if err.error_code != ErrorCode.Name(RESOURCE_ALREADY_EXISTS):
                raise

    def _version(
        self,
        name: str,
        experiment_id: str,
        outcome: TrialOutcome,
        aliases: list[str],
        folder: str,
        lineage: Lineage,
    ) -> str:
        """Log the trial's ensemble as a model into its run; register it; its version."""
        query = f"tags.`{TRIAL_TAG}` = '{outcome.trial_id}'"
        runs = self.client.search_runs([experiment_id], query, max_results=1)
        if not runs:
            raise LookupError(f"no MLflow run of trial {outcome.trial_id}")
        run_id = runs[0].info.run_id
        local = mlflow.artifacts.download_artifacts(
            run_id=run_id,
            artifact_path=ENSEMBLE_FILE,
            dst_path=str(Path(folder, outcome.trial_id)),
            tracking_uri=self.uri,
        )
        own = {"trial_id": outcome.trial_id, "experiment": self.experiment}
        info = log_encoder(
            self.client, Path(local), experiment_id=experiment_id, run_id=run_id, tags=own
        )
        version = self.client.create_model_version(
            name,
            source=info.model_uri,
            run_id=run_id,
            tags={**own, **self._tags(outcome, run_id, aliases), **lineage.tags()},
            description=f"Chosen as {', '.join(aliases)} among the trials of search "
            f"{self.experiment!r}: trial {outcome.trial_id}, dev R@10 mean "
            f"{outcome.retrieval:.2f}, dev semantic {outcome.semantic:.4f}. The registered "
            "model's aliases name the best among comparable models (its tags say which "
            "this version got or lost, and why).",
            model_id=info.model_id,
        )
        # as MLflow's own registration does: the logged model's page lists its version
        listed = json.dumps([{"name": name, "version": str(version.version)}])
        self.client.set_logged_model_tags(info.model_id, {MLFLOW_MODEL_VERSIONS: listed})
        return str(version.version)

    def _tags(self, outcome: TrialOutcome, run_id: str, aliases: list[str]) -> dict[str, str]:
        """A version's tags besides the trial, experiment and lineage: where it comes
        from, what it was chosen as among its search's trials, and its dev and test
        values."""
        values = {k: f"{outcome.metrics[k]:.6g}" for k in _VALUE_TAGS if k in outcome.metrics}
        return {
            "run_id": run_id,
            "space": self.space,
            _CHOSEN_TAG: ", ".join(aliases),
            **values,
        }
