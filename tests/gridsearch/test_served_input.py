"""What a served registered model (``mlflow models serve``) answers to a request that is
not sentences: the scoring server's own request handling (``invocations``, in this
process) on a real logged ``SentenceEncoderModel``: 400 with a line that says what was
expected, for every kind of input the model can tell apart (numbers, booleans, nulls,
params: its signature's column is of any type, so that MLflow leaves the values as they
came); 200 and the vectors of ``SentenceEncoder.encode`` for sentences in each of the
forms MLflow takes. (What MLflow drops before the model sees it, the model cannot refuse:
a DataFrame's columns besides the first ``sentence`` one; a lone string is one sentence.)"""

from __future__ import annotations

import json
from pathlib import Path

import mlflow.pyfunc
import numpy as np
import pytest
from mlflow.exceptions import MlflowException
from mlflow.pyfunc import scoring_server
from mlflow.tracking import MlflowClient

from gridsearch.registry import log_encoder
from gridsearch.tracking import using_tracking_uri
from trainables import checkpoint
from trainables.checkpoint import EnsembleWeights
from trainables.config import TrainConfig
from trainables.data import TrainingData
from trainables.encode import MAX_CHARS
from trainables.encoder import SentenceEncoder
from trainables.loop import Trainer

SMALL = dict(hidden_size=8, batch_size=8, epochs=1, snapshot_interval=1, ensemble_size=1,
             device="cpu", semantic_every=0, threads=1)  # fmt: skip
SENTENCES = ["A small red circle.", "", "two blue squares"]


@pytest.fixture(scope="module")
def served(tiny_world: Path, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("served")
    trainer = Trainer(TrainConfig(**SMALL), TrainingData.from_store(str(tiny_world)))
    list(trainer.run())
    ensemble = EnsembleWeights.from_training_state(trainer.state_dict()).save(
        folder / checkpoint.ENSEMBLE_FILE
    )
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    experiment = client.create_experiment("served", artifact_location=(folder / "a").as_uri())
    info = log_encoder(client, ensemble, experiment_id=experiment)
    with using_tracking_uri(uri):
        model = mlflow.pyfunc.load_model(info.model_uri)
    return model, SentenceEncoder.load(ensemble, device="cpu").encode(SENTENCES)


def _answer(model, body: object) -> tuple[int, str]:
    """The status and body ``mlflow models serve`` answers to the JSON ``body``."""
    schema = model.metadata.get_input_schema()
    try:
        done = scoring_server.invocations(json.dumps(body), "application/json", model, schema)
    except MlflowException as refused:
        return refused.get_http_status_code(), refused.message
    return done.status, done.response


@pytest.mark.slow  # 5 s or more in the fast tier (BENCHMARKS.md)
def test_sentences_in_each_form_are_embedded(served) -> None:
    model, expected = served
    for body in (
        {"inputs": SENTENCES},
        {"dataframe_split": {"columns": ["sentence"], "data": [[s] for s in SENTENCES]}},
        {"dataframe_records": [{"sentence": s} for s in SENTENCES]},
        {"inputs": ["x" * MAX_CHARS]},  # the bound itself
    ):
        status, answer = _answer(model, body)
        assert status == 200, answer
        if len(body.get("inputs", [])) != 1:
            got = np.asarray(json.loads(answer)["predictions"], dtype=np.float32)
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"dataframe_split": {"columns": ["text"], "data": [["a"]]}}, "'sentence'"),
        ({"dataframe_records": [{"text": "a"}]}, "'sentence'"),
        ({"inputs": ["x" * (MAX_CHARS + 1)]}, f"{MAX_CHARS + 1:,} characters"),
        ({"inputs": ["ok", "x" * 480_000]}, "row 1 has 480,000 characters"),
        ({"dataframe_split": {"columns": ["sentence"], "data": [["a"], [None]]}}, "sentence"),
        ({"inputs": {"sentence": ["a"]}}, "Invalid input"),
        ({"inputs": ["a", 1]}, "expected strings, got int '1'"),
        ({"inputs": [1.5]}, "expected strings, got float"),
        ({"inputs": [True]}, "expected strings, got bool 'True'"),
        ({"inputs": [None]}, "expected strings, got NoneType"),
        ({"instances": ["a", 7]}, "expected strings, got int '7'"),
        ({"dataframe_records": [{"sentence": 1}]}, "expected strings, got int '1'"),
        ({"inputs": ["a"], "params": {"device": "cuda"}}, "params: this model takes none"),
        ({"inputs": ["a"], "params": {}}, "params: this model takes none"),
        (
            {"dataframe_split": {"columns": ["other", "sentence"], "data": [["a", "b"]]}},
            "'sentence'",
        ),
    ],
    ids=[
        "misnamed",
        "misnamed-records",
        "past-the-bound",
        "480k",
        "null-cell",
        "named-inputs",
        "an-int",
        "a-float",
        "a-boolean",
        "a-null",
        "instances-int",
        "records-int",
        "params",
        "empty-params",
        "sentence-second",
    ],
)
def test_a_request_that_is_not_sentences_is_a_400_saying_what_was_expected(
    served, body: object, expected: str
) -> None:
    model, _ = served
    status, answer = _answer(model, body)
    assert status == 400 and expected in answer, (status, answer[:300])


@pytest.mark.parametrize(
    "body",
    [
        {"inputs": ["x" * 500_000]},
        {"inputs": ["ok", "x" * 500_000]},
        {"dataframe_split": {"columns": ["sentence"], "data": [["x" * 500_000]]}},
        {"dataframe_records": [{"sentence": "x" * 500_000}]},
    ],
    ids=["inputs", "inputs-second", "split", "records"],
)
def test_a_refused_request_is_not_answered_with_itself(served, body: object) -> None:
    """MLflow's scoring server writes the request before the model's error: the answer to
    a refused 500,000-character request stays short and says why."""
    model, _ = served
    schema = model.metadata.get_input_schema()
    with pytest.raises(MlflowException) as refused:
        scoring_server.invocations(json.dumps(body), "application/json", model, schema)
    answer = refused.value.serialize_as_json()  # the body a model server sends
    assert refused.value.get_http_status_code() == 400 and len(answer) < 1_000, len(answer)
    assert "has 500,000 characters; sentences of at most 10,000 are encoded" in answer


@pytest.mark.slow  # in the module's model (its fixture is the cost)
def test_what_mlflow_drops_before_the_model_sees_it(served) -> None:
    """Documented, not refused (the model never sees it): a data frame's columns after
    its first (``sentence`` first: the rest dropped), a lone string (one sentence)."""
    model, expected = served
    split = {"columns": ["sentence", "other"], "data": [[s, 7] for s in SENTENCES]}
    status, answer = _answer(model, {"dataframe_split": split})
    assert status == 200, answer
    got = np.asarray(json.loads(answer)["predictions"], dtype=np.float32)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    status, answer = _answer(model, {"inputs": SENTENCES[0]})
    assert status == 200 and len(json.loads(answer)["predictions"]) == 1, answer
