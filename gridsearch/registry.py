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
is tagged with its trial, run, experiment and dev and test values. A search that ends
again (``--resume``) registers new versions and points the aliases at them.

    import mlflow

    model = mlflow.pyfunc.load_model("models:/grounded-margin_sweep@best-retrieval")
    model.predict(["A small red circle.", "Two blue squares."])  # (2, dim) float32

The model (``SentenceEncoderModel``) takes one column of strings (a DataFrame with a
``sentence`` column, or a list of strings: its signature's column is unnamed, as MLflow
takes a list only for that) and returns float32 L2-normalised embeddings ``(N, dim)``,
exactly what ``trainables.encoder.SentenceEncoder.encode`` returns for the trial's
``ensemble.pt`` (its one artifact), on the CPU unless loaded with
``model_config={"device": "auto"}``. Another column, a value that is not a string, or
a sentence over the ``encode`` command's 10,000 characters is refused with what was
expected (a model server answers 400; MLflow itself turns a list's values into strings
and drops unnamed extra columns before the model sees them). It is a model from code
(``_encoder_model.py``, no pickle), carries this package's code (``gridsearch``,
``storage``, ``trainables`` as ``code_paths``: it loads without the package installed,
with the code it was registered with) and requires this package's dependencies.
"""

from __future__ import annotations

import importlib.metadata
import json
import tempfile
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
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
from mlflow.types import ColSpec, DataType, Schema, TensorSpec
from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS
from packaging.requirements import Requirement

import gridsearch
import storage
import trainables
from gridsearch._outcome import Outcome
from gridsearch._space_file import SPACE_NAME
from gridsearch.summary import TrialOutcome, best_trial, pareto_front, without_password
from gridsearch.tracking import TRIAL_TAG, using_tracking_uri
from storage.cli import error_line
from trainables import names
from trainables.checkpoint import ENSEMBLE_FILE, load_ensemble
from trainables.encoder import MAX_CHARS, SentenceEncoder

__all__ = [
    "BEST_ALIASES",
    "INPUT_COLUMN",
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
                inputs=Schema([ColSpec(DataType.string)]),  # unnamed: a list of strings is one
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
) -> dict[str, str]:
    """Register the trials ``choose`` picks (see the module docstring); returns alias ->
    version. A registry that fails (a tracking server away) is one ``warning:`` line to
    ``write`` and no alias moved: the search itself is all recorded already."""
    picks = choose(outcomes, objective)
    if not picks:
        return {}
    name = model_name(space)
    try:
        versions = _Search(tracking_uri, experiment, space, objective).register(name, picks)
    except Exception as err:  # MLflow raises many kinds for a store that is away
        write(
            f"warning: the best models were not registered as {name!r} in "
            f"{without_password(tracking_uri)} ({error_line(err, 200)}); the search is "
            f"recorded all the same, every trial's {ENSEMBLE_FILE} in its run"
        )
        return {}
    for version in sorted(set(versions.values()), key=int):
        aliases = [a for a, v in versions.items() if v == version]
        trial = picks[aliases[0]].trial_id
        write(f"registered models:/{name}@{aliases[0]} (version {version}, trial {trial})")
        if len(aliases) > 1:
            write(f"  also {', '.join(aliases[1:])}")
    return versions


class _Search:
    """One search's experiment, as the registry sees it."""

    def __init__(self, tracking_uri: str, experiment: str, space: str, objective: str) -> None:
        self.uri, self.experiment = tracking_uri, experiment
        self.space, self.objective = space, objective
        self.client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)

    def register(self, name: str, picks: Mapping[str, TrialOutcome]) -> dict[str, str]:
        """A new version per picked trial, then every alias pointed at its version and
        this module's aliases that no longer name a trial removed."""
        found = self.client.get_experiment_by_name(self.experiment)
        if found is None:
            raise LookupError(f"no MLflow experiment {self.experiment!r}")
        self._ensure_model(name)
        by_trial: dict[str, list[str]] = {}
        for alias, outcome in picks.items():
            by_trial.setdefault(outcome.trial_id, []).append(alias)
        versions: dict[str, str] = {}
        with using_tracking_uri(self.uri), tempfile.TemporaryDirectory() as folder:
            for aliases in by_trial.values():
                outcome = picks[aliases[0]]
                version = self._version(name, found.experiment_id, outcome, aliases, folder)
                versions.update(dict.fromkeys(aliases, version))
        for alias, version in versions.items():
            self.client.set_registered_model_alias(name, alias, version)
        for alias in self.client.get_registered_model(name).aliases:
            if alias not in versions and _ours(alias):
                self.client.delete_registered_model_alias(name, alias)
        return versions

    def _ensure_model(self, name: str) -> None:
        try:
            self.client.create_registered_model(
                name,
                tags={"space": self.space},
                description=f"Sentence encoders found by searches of the space {self.space!r} "
                "(gridsearch.run): aliases best-retrieval, best-semantic, pareto-K.",
            )
        except MlflowException as err:
            if err.error_code != ErrorCode.Name(RESOURCE_ALREADY_EXISTS):
                raise

    def _version(
        self, name: str, experiment_id: str, outcome: TrialOutcome, aliases: list[str], folder: str
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
            tags={**own, **self._tags(outcome, run_id, aliases)},
            description=f"{', '.join(aliases)} of search {self.experiment!r}: trial "
            f"{outcome.trial_id}, dev R@10 mean {outcome.retrieval:.2f}, dev semantic "
            f"{outcome.semantic:.4f}",
            model_id=info.model_id,
        )
        # as MLflow's own registration does: the logged model's page lists its version
        listed = json.dumps([{"name": name, "version": str(version.version)}])
        self.client.set_logged_model_tags(info.model_id, {MLFLOW_MODEL_VERSIONS: listed})
        return str(version.version)

    def _tags(self, outcome: TrialOutcome, run_id: str, aliases: list[str]) -> dict[str, str]:
        """A version's tags besides the trial and experiment: where it comes from, what it
        was chosen as, and its dev and test values."""
        values = {k: f"{outcome.metrics[k]:.6g}" for k in _VALUE_TAGS if k in outcome.metrics}
        return {
            "run_id": run_id,
            "space": self.space,
            "objective": self.objective,
            "chosen_as": ", ".join(aliases),
            **values,
        }


def _ours(alias: str) -> bool:
    return alias in BEST_ALIASES or alias.startswith(PARETO_ALIAS.format(""))
