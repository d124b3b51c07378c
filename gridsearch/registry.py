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

The model (``SentenceEncoderModel``) takes one column of strings (a DataFrame with a
``sentence`` column, or a list of strings: its signature's column is unnamed, as MLflow
takes a list only for that) and returns float32 L2-normalised embeddings ``(N, dim)``,
exactly what ``trainables.encoder.SentenceEncoder.encode`` returns for the trial's
``ensemble.pt`` (its one artifact), on the CPU unless loaded with
``model_config={"device": "auto"}``. Another column, a value that is not a string (a
number, ``true``, ``null``), a sentence over the ``encode`` command's 10,000 characters,
or ``params`` (it takes none) are refused with what was expected (a model server answers
400). Its signature's column is of any type, not of strings: MLflow turns the values of
a column of strings into strings before the model sees them, and the model could not
refuse ``[1, true, null]``. What MLflow does before the model sees a request, and the
model cannot undo: of a DataFrame of several columns it keeps the first (``sentence``
first: the rest are dropped unseen), reads a lone string as a list of one, and hands on
``params`` as an empty dictionary (what they held is dropped unseen; the model refuses
them whatever they held). It is a model from code
(``_encoder_model.py``, no pickle), carries this package's code (``gridsearch``,
``storage``, ``trainables`` as ``code_paths``: it loads without the package installed,
with the code it was registered with) and requires this package's dependencies.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import math
import tempfile
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
import mlflow.artifacts
import mlflow.pyfunc
import numpy as np
import pandas as pd
from mlflow.entities import LoggedModelOutput
from mlflow.exceptions import MlflowException
from mlflow.models import ModelSignature
from mlflow.models.model import ModelInfo
from mlflow.protos.databricks_pb2 import (
    INVALID_PARAMETER_VALUE,
    RESOURCE_ALREADY_EXISTS,
    ErrorCode,
)
from mlflow.pyfunc.model import PythonModel, PythonModelContext
from mlflow.tracking import MlflowClient
from mlflow.types import ColSpec, Schema, TensorSpec
from mlflow.types.schema import AnyType
from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS
from packaging.requirements import Requirement

import gridsearch
import storage
import trainables
from gridsearch._outcome import Outcome
from gridsearch._space_file import SPACE_NAME
from gridsearch.summary import TrialOutcome, best_trial, pareto_front, without_password
from gridsearch.tracking import ROLE_SEARCH, ROLE_TAG, TRIAL_TAG, using_tracking_uri
from storage.cli import error_line
from trainables import names
from trainables.checkpoint import ENSEMBLE_FILE, load_ensemble
from trainables.encoder import MAX_CHARS, SentenceEncoder

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

INPUT_COLUMN = "sentence"  # the model's one input column
BEST_ALIASES = {"best-retrieval": names.BEST_RETRIEVAL, "best-semantic": names.BEST_SEMANTIC}
PARETO_ALIAS = "pareto-{}"  # 1-based, by dev R@10 mean, best first
_ARTIFACT = "ensemble"  # the key of ensemble.pt among the model's artifacts
_MODEL_CODE = Path(__file__).with_name("_encoder_model.py")  # builds the model on loading
_DISTRIBUTION = "grounded-gridsearch"  # this package, whose dependencies the model needs
_EXAMPLE = ["A small red circle.", "Two blue squares next to a green triangle."]
# A version's tags: the values it was chosen on (dev) and its ensemble's test values.
_VALUE_TAGS = (
    names.BEST_RETRIEVAL,
    names.BEST_SEMANTIC,
    names.FINISHED,
    names.key(names.ENSEMBLE, "semantic"),
)

Write = Callable[[str], None]


class SentenceEncoderModel(PythonModel):
    """A trained ensemble that embeds sentences (see the module docstring)."""

    def load_context(self, context: PythonModelContext) -> None:
        device = (context.model_config or {}).get("device", "cpu")
        self.encoder = SentenceEncoder.load(context.artifacts[_ARTIFACT], device=device)

    def predict(
        self,
        context: PythonModelContext,
        model_input: pd.DataFrame,
        params: dict[str, Any] | None = None,
    ) -> np.ndarray:
        if params is not None:  # MLflow hands on {} for params it dropped, None for none
            raise _bad_input(
                "params: this model takes none (MLflow drops what a request names before "
                "the model sees it; leave params out)"
            )
        return self.encoder.encode(_sentences(model_input))


def _sentences(model_input: Any) -> list[str]:
    """The ``sentence`` column of a DataFrame (what MLflow passes after checking the
    input against the signature: a list's column is unnamed, ``0``), or a Series or list
    of strings, each at most ``MAX_CHARS`` characters as the ``encode`` command takes.
    Anything else is an ``MlflowException`` of a bad parameter, which a model server
    answers with 400 and the message."""
    if isinstance(model_input, pd.DataFrame):
        columns = list(model_input.columns)
        if columns not in ([INPUT_COLUMN], [0]):
            raise _bad_input(
                f"expected one column, {INPUT_COLUMN!r} (or a list of strings), got "
                f"the columns {[str(c)[:40] for c in columns[:5]]}"
            )
        model_input = model_input[columns[0]]
    if isinstance(model_input, str | bytes) or not isinstance(model_input, Iterable):
        raise _bad_input(f"expected a list of strings, got {type(model_input).__name__}")
    sentences = list(model_input)
    for row, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise _bad_input(
                f"expected strings, got {type(sentence).__name__} {str(sentence)[:40]!r} "
                f"in row {row}"
            )
        if len(sentence) > MAX_CHARS:
            raise _bad_input(
                f"row {row} has {len(sentence):,} characters; sentences of at most "
                f"{MAX_CHARS:,} are encoded"
            )
    return sentences


ECHO_LIMIT = 200  # characters of a refused request that the answer repeats


class RefusedInput(MlflowException):
    """A request the model refuses (``_sentences``): a model server answers 400 with this
    message, which says what was expected. MLflow's scoring server writes the whole
    request before the message of an error that ``predict`` raises (``Failed to predict
    data '<the request>'``), so that a refused request of 500,000 characters would be
    answered with those 500,000 characters: what is written before this message is cut
    to ``ECHO_LIMIT`` characters."""

    def __init__(self, what: str) -> None:
        self._own = f"model input: {what}"
        super().__init__(self._own, error_code=INVALID_PARAMETER_VALUE)

    @property
    def message(self) -> str:
        return self._message

    @message.setter
    def message(self, value: str) -> None:
        own = getattr(self, "_own", "")
        before = value[: len(value) - len(own)] if own and value.endswith(own) else ""
        if len(before) > ECHO_LIMIT:
            cut = len(before) - ECHO_LIMIT
            value = f"{before[:ECHO_LIMIT]} [{cut:,} more characters of the request] {own}"
        self._message = value


def _bad_input(what: str) -> MlflowException:
    return RefusedInput(what)


def model_name(space: str) -> str:
    """The registered model of a search space: ``grounded-margin_sweep``. A space name
    that cannot name one (checked when a space file is read) is a ValueError."""
    if not SPACE_NAME.fullmatch(space):
        raise ValueError(f"space name {space[:60]!r}: cannot name a registered model")
    return f"grounded-{space}"


def requirements() -> list[str]:
    """This package's dependencies: its ``pyproject.toml``'s in a checkout, else those of
    the installed distribution (without extras)."""
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    if pyproject.is_file():
        return [str(r) for r in tomllib.loads(pyproject.read_text())["project"]["dependencies"]]
    found = importlib.metadata.requires(_DISTRIBUTION) or []
    return [r for r in found if (m := Requirement(r).marker) is None or m.evaluate({"extra": ""})]


def log_encoder(
    client: MlflowClient,
    ensemble: Path,
    *,
    experiment_id: str,
    run_id: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> ModelInfo:
    """Log ``ensemble`` (an ``ensemble.pt``) as a ``SentenceEncoderModel`` named
    ``encoder`` in ``client``'s store: a logged model of the experiment, an output of
    ``run_id``'s run (a closed run stays closed) with its parameters."""
    dim = load_ensemble(ensemble).config.embedding_dim
    params = dict(client.get_run(run_id).data.params) if run_id else None
    # Created here rather than by log_model, which would put it in MLflow's active
    # experiment (the Default one) instead of the run's, and link it to the active run.
    logged = client.create_logged_model(
        experiment_id, name="encoder", source_run_id=run_id, params=params, tags=dict(tags or {})
    )
    code = [str(Path(p.__file__).parent) for p in (gridsearch, storage, trainables) if p.__file__]
    with using_tracking_uri(client.tracking_uri):
        info = mlflow.pyfunc.log_model(
            name="encoder",
            model_id=logged.model_id,
            python_model=str(_MODEL_CODE),
            artifacts={_ARTIFACT: str(ensemble)},
            code_paths=code,
            signature=ModelSignature(
                # one unnamed column (a list of strings is one), of any type: MLflow turns
                # the values of a column of strings into strings before the model sees
                # them (1, true and null would be encoded); the model refuses what is not one
                inputs=Schema([ColSpec(AnyType())]),
                outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, dim))]),
            ),
            input_example=pd.DataFrame({INPUT_COLUMN: _EXAMPLE}),
            pip_requirements=requirements(),
            metadata={"embedding_dim": dim, "normalized": True},
            model_config={"device": "cpu"},  # load_model(..., model_config=...) overrides it
        )
    if run_id:
        client.log_outputs(run_id, [LoggedModelOutput(logged.model_id, step=0)])
    return info


def choose(outcomes: Sequence[TrialOutcome], objective: str) -> dict[str, TrialOutcome]:
    """The trial each alias names: the best finished trial per objective, and for
    ``objective == "both"`` each finished trial on the Pareto front."""
    finished = [o for o in outcomes if o.status == Outcome.FINISHED.value]
    picks = {}
    for alias, metric in BEST_ALIASES.items():
        best = best_trial(finished, names.selectable(metric))
        if best is not None:
            picks[alias] = best
    if objective == "both":
        front = pareto_front([(o.retrieval, o.semantic) for o in finished])
        picks.update({PARETO_ALIAS.format(k): finished[i] for k, i in enumerate(front, 1)})
    return picks


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


@dataclass(frozen=True)
class Lineage:
    """What makes two searches' models comparable on their dev values: the store they
    trained and were evaluated on (its manifest's sha256), the semantic sets (the store's
    own, or a ``--senteval`` folder), the objective they were searched for; and whether
    the search was a ``--smoke-test`` (the same path, tiny: never the best of a real
    search)."""

    experiment: str
    store: str
    semantic: str
    objective: str
    smoke_test: bool

    def tags(self) -> dict[str, str]:
        return {
            _STORE_TAG: self.store,
            _SEMANTIC_TAG: self.semantic,
            "objective": self.objective,
            _SMOKE_TAG: str(self.smoke_test).lower(),
        }

    def unlike(self, other: Lineage) -> str | None:
        """Why ``other``'s models cannot be compared with this search's, or None."""
        if other.store != self.store:
            return (
                f"trained on another store (data manifest sha256 {other.store[:12]}, this "
                f"search's {self.store[:12]}): dev values of two stores are not comparable"
            )
        if other.semantic != self.semantic:
            return (
                f"evaluated on other semantic sets ({other.semantic}, this search's "
                f"{self.semantic}): their dev semantic scores are not comparable"
            )
        if other.objective != self.objective:
            return f"searched for objective {other.objective}, this search for {self.objective}"
        return None


_STORE_TAG = "data_manifest_sha256"
_SEMANTIC_TAG = "semantic_sets"
_SMOKE_TAG = "smoke_test"
_CHOSEN_TAG = "chosen_in_search"  # what a version was chosen as among its search's trials
_REPLACED_TAG = "replaced"  # on a version: the aliases it lost, to which version and why
_NOT_ALIASED_TAG = "not_aliased"  # on a version: the aliases it was chosen for but did not get
_LABELS = {"best-retrieval": "dev R@10 mean", "best-semantic": "dev semantic"}
_PARETO = PARETO_ALIAS.format("")


@dataclass
class _Registered:
    """What one registration did: this search's version per alias it picked
    (``versions``), the aliases they took (``taken``), and where each other alias
    stayed and why (``kept``: alias -> (version, why))."""

    versions: dict[str, str]
    taken: dict[str, str] = dataclasses.field(default_factory=dict)
    kept: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    notes: dict[str, str] = dataclasses.field(default_factory=dict)  # alias -> how it moved
    front: str | None = None  # why the pareto aliases moved, when they did

    def keep_front(self, front: Mapping[str, str], mine: Sequence[str], why: str) -> None:
        """The pareto aliases stay as they are (``front``; this search's beyond it stay
        unset)."""
        for alias in sorted({*front, *mine}, key=_pareto_number):
            self.kept[alias] = (front.get(alias, ""), why)

    def lines(self, name: str, picks: Mapping[str, TrialOutcome]) -> list[str]:
        """What was registered, where each alias is now, and why where that is news."""
        chosen = {version: alias for alias, version in reversed(self.versions.items())}
        lines = []
        for version in sorted({v for v in self.taken.values() if v in chosen}, key=int):
            aliases = [a for a, v in self.taken.items() if v == version]
            trial = picks[chosen[version]].trial_id
            lines.append(
                f"registered models:/{name}@{aliases[0]} (version {version}, trial {trial})"
            )
            if len(aliases) > 1:
                lines.append(f"  also {', '.join(aliases[1:])}")
            lines += [f"  {self.notes[a]}" for a in aliases if a in self.notes]
        if self.front is not None:
            front = sorted((a for a in self.taken if a.startswith(_PARETO)), key=_pareto_number)
            listed = ", ".join(f"@{a} version {self.taken[a]}" for a in front)
            lines.append(f"  {self.front}: {listed}")
        by_why: dict[str, list[tuple[str, str]]] = {}
        for alias, (version, why) in self.kept.items():
            by_why.setdefault(why, []).append((alias, version))
        for why, kept in by_why.items():
            mine = [a for a, _ in kept if a in self.versions]
            versions = sorted({self.versions[a] for a in mine}, key=int)
            where = ", ".join(f"@{a} at version {v}" if v else f"@{a} unset" for a, v in kept)
            lines.append(
                f"registered version(s) {', '.join(versions)} of models:/{name} (this "
                f"search's {', '.join(mine)}); the aliases stay ({where}): {why}"
            )
        return lines


class _Search:
    """One search's experiment, as the registry sees it."""

    def __init__(
        self, tracking_uri: str, experiment: str, space: str, objective: str, smoke_test: bool
    ) -> None:
        self.uri, self.experiment = tracking_uri, experiment
        self.space, self.objective, self.smoke_test = space, objective, smoke_test
        self.client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)

    def register(self, name: str, picks: Mapping[str, TrialOutcome]) -> _Registered:
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
        registered = _Registered(versions)
        for alias in (a for a in versions if a in BEST_ALIASES):
            self._decide(name, alias, lineage, picks, held, registered)
        self._decide_front(name, lineage, picks, held, registered)
        for alias, version in registered.taken.items():
            if held.get(alias) != version:
                self.client.set_registered_model_alias(name, alias, version)
        self._tag_changes(name, held, registered)
        return registered

    def _decide(
        self,
        name: str,
        alias: str,
        lineage: Lineage,
        picks: Mapping[str, TrialOutcome],
        held: Mapping[str, str],
        registered: _Registered,
    ) -> None:
        """``best-retrieval`` or ``best-semantic``: this search's version takes it, or
        it stays where it is (``registered.kept``, with why)."""
        version = registered.versions[alias]
        holder = held.get(alias)
        if holder is None:
            registered.taken[alias] = version
            return
        holding = self._holder(name, holder)
        take, why = self._verdict(lineage, holding)
        if take is None:  # comparable, from another search: the better dev value wins
            metric = BEST_ALIASES[alias]
            mine = float(picks[alias].metrics.get(metric, float("nan")))
            theirs = _number(holding.tags.get(metric))
            label = _LABELS[alias]
            if theirs is not None and not mine > theirs:
                take, why = (
                    False,
                    (
                        f"its {label} {theirs:.4g} (search {holding.lineage.experiment!r}) is at "
                        f"least this search's best, {mine:.4g}"
                    ),
                )
            else:
                take = True
                was = "no value" if theirs is None else f"{theirs:.4g}"
                why = f"better {label} than version {holder}'s ({mine:.4g} > {was})"
        if take:
            registered.taken[alias] = version
            registered.notes[alias] = f"@{alias} was at version {holder}: {why}"
        else:
            registered.kept[alias] = (holder, why)

    def _decide_front(
        self,
        name: str,
        lineage: Lineage,
        picks: Mapping[str, TrialOutcome],
        held: Mapping[str, str],
        registered: _Registered,
    ) -> None:
        """The ``pareto-K`` aliases, as one: this search's front takes them, or the front
        of its models and those of the comparable search that holds them does, or they
        stay (``registered.front``: why they moved, when they did)."""
        mine = sorted((a for a in picks if a.startswith(_PARETO)), key=_pareto_number)
        if not mine:
            return
        front = {a: v for a, v in held.items() if a.startswith(_PARETO)}
        first = front.get(PARETO_ALIAS.format(1)) or next(iter(front.values()), None)
        if first is None:
            registered.taken.update({a: registered.versions[a] for a in mine})
            return
        holding = self._holder(name, first)
        take, why = self._verdict(lineage, holding)
        if take is False:
            registered.keep_front(front, mine, why)
            return
        if take:  # this search's front replaces the one held
            registered.taken.update({a: registered.versions[a] for a in mine})
            registered.front = f"the pareto aliases were {why}"
            return
        # comparable, from another search: the front of both fronts' models
        candidates = {registered.versions[a]: (picks[a].retrieval, picks[a].semantic) for a in mine}
        for version in front.values():
            tags = self.client.get_model_version(name, version).tags
            r10 = _number(tags.get(names.BEST_RETRIEVAL))
            semantic = _number(tags.get(names.BEST_SEMANTIC))
            if r10 is not None and semantic is not None:
                candidates[version] = (r10, semantic)
        listed = list(candidates)
        merged = [listed[i] for i in pareto_front([candidates[v] for v in listed])]
        other = holding.lineage.experiment
        if set(merged) == set(front.values()):  # the front held stands as it was
            why = (
                f"no model of this search is on the Pareto front of its models and those of "
                f"search {other!r} (version {holding.version} and the rest of the front held)"
            )
            registered.keep_front(front, mine, why)
            return
        registered.taken.update({PARETO_ALIAS.format(k): v for k, v in enumerate(merged, 1)})
        registered.front = (
            f"the pareto aliases name the Pareto front of this search's models and those of "
            f"search {other!r} (the same store, semantic sets and objective)"
        )

    def _verdict(self, lineage: Lineage, holding: _Holder) -> tuple[bool | None, str]:
        """Whether this search's version takes an alias ``holding`` holds: True (with
        why), False (with why it stays), None where the two are comparable and the
        better dev value decides."""
        theirs = holding.lineage
        where = f"version {holding.version}, search {theirs.experiment!r}"
        if theirs.experiment == lineage.experiment:
            return True, f"this search's own ({where}): it ended again"
        if theirs.smoke_test and not lineage.smoke_test:
            return True, f"a --smoke-test's ({where}), which a search's models replace"
        if lineage.smoke_test and not theirs.smoke_test:
            return False, (
                f"its model is a search's ({where}); a --smoke-test's models never replace it"
            )
        why = lineage.unlike(theirs)
        if why is not None:
            return False, f"{where}: {why}"
        return None, where

    def _holder(self, name: str, version: str) -> _Holder:
        """The version that holds an alias, with its search's lineage: its tags, else
        (a version registered before they were written) its search's parent run."""
        found = self.client.get_model_version(name, version)
        tags = dict(found.tags)
        experiment = tags.get("experiment", "?")
        if _STORE_TAG in tags:
            lineage = Lineage(
                experiment,
                tags[_STORE_TAG],
                tags.get(_SEMANTIC_TAG, ""),
                tags.get("objective", ""),
                tags.get(_SMOKE_TAG) == "true",
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
        return _Holder(str(found.version), tags, lineage)

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

    def _tag_changes(self, name: str, held: Mapping[str, str], registered: _Registered) -> None:
        """The versions that lost an alias say to which version and why; this search's
        versions that did not get an alias they were chosen for say where it stays. A
        pareto alias beyond a front that moved and is shorter now is removed."""
        lost: dict[str, list[str]] = {}
        for alias, before in held.items():
            now = registered.taken.get(alias)
            if alias.startswith(_PARETO) and registered.front is not None:
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


@dataclass(frozen=True)
class _Holder:
    version: str
    tags: Mapping[str, str]
    lineage: Lineage


_TAG_LIMIT = 5000  # characters of a version tag kept (its end)


def _number(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return None if value is None or math.isnan(value) else value


def _pareto_number(alias: str) -> int:
    return int(alias.removeprefix(PARETO_ALIAS.format("")))
