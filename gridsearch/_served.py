"""The model a registered version serves: ``SentenceEncoderModel``, an MLflow pyfunc model
that embeds sentences, and ``log_encoder``, which logs a trial's ensemble as one
(``gridsearch.registry`` registers them).

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

import importlib.metadata
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import mlflow
import mlflow.pyfunc
import numpy as np
import pandas as pd
from mlflow.entities import LoggedModelOutput
from mlflow.exceptions import MlflowException
from mlflow.models import ModelSignature
from mlflow.models.model import ModelInfo
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.pyfunc.model import PythonModel, PythonModelContext
from mlflow.tracking import MlflowClient
from mlflow.types import ColSpec, Schema, TensorSpec
from mlflow.types.schema import AnyType
from packaging.requirements import Requirement

import gridsearch
import storage
import trainables
from gridsearch.tracking import using_tracking_uri
from trainables.checkpoint import load_ensemble
from trainables.encoder import MAX_CHARS, SentenceEncoder

__all__ = [
    "ECHO_LIMIT",
    "INPUT_COLUMN",
    "RefusedInput",
    "SentenceEncoderModel",
    "log_encoder",
    "requirements",
]

INPUT_COLUMN = "sentence"  # the model's one input column
_ARTIFACT = "ensemble"  # the key of ensemble.pt among the model's artifacts
_MODEL_CODE = Path(__file__).with_name("_encoder_model.py")  # builds the model on loading
_DISTRIBUTION = "grounded-gridsearch"  # this package, whose dependencies the model needs
_EXAMPLE = ["A small red circle.", "Two blue squares next to a green triangle."]
# A version's tags: the values it was chosen on (dev) and its ensemble's test values.


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
