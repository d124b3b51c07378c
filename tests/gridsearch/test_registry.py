"""The Model Registry at the end of a search, and the data lineage of its runs: a tiny real
search (``--objective both``) through the real CLI, its best trials registered as pyfunc
models that embed sentences as ``SentenceEncoder`` does, loaded back by alias, served by
``mlflow models serve`` over HTTP; and a registry that is away. (A registry that fails
without losing the search: the warm-started search of ``test_run.py``.)"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from packaging.requirements import Requirement

from analysis._tracking import find_run
from gridsearch._relocate import rebase_pickle
from gridsearch.registry import (
    choose,
    model_name,
    register_best,
)
from gridsearch.run import main
from gridsearch.summary import TrialOutcome, best_trial, pareto_front
from gridsearch.tracking import forget_database, using_tracking_uri
from gridsearch.tracking._lineage import DIGEST_LENGTH
from storage import FeatureStore
from trainables import names
from trainables.checkpoint import ENSEMBLE_FILE, load_ensemble
from trainables.encode import main as encode_main
from trainables.encoder import SentenceEncoder

ROOT = Path(__file__).resolve().parents[2]
STORE_TAG = "data_manifest_sha256"
EXPERIMENT = "best"
SPACE = "lr_bounds"  # trials that differ (a margin sweep's tiny trials tie)
NAME = model_name(SPACE)
SMOKE = ["--smoke-test", "--no-dashboard"]
SENTENCES = ["A small red circle.", "two blue squares next to a green triangle", ""]


class Search(NamedTuple):
    runs_dir: Path
    uri: str
    out: str  # what the CLI printed
    seconds: float  # the wall time of the command (main) that ran it


def _run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(argv)
    return status, out.getvalue()


@pytest.fixture(scope="module")
def search(
    tiny_world: Path, tmp_path_factory: pytest.TempPathFactory, on_cluster: list[str]
) -> Search:
    runs_dir = tmp_path_factory.mktemp("registry-search")
    # FIFO: every trial to the end whatever order they arrive in (auto would halve by
    # Pareto rank for "both"); one at a time, so that one reused trial process trains
    # the three, not two processes
    argv = ["--space", SPACE, *SMOKE, "--objective", "both", "--num-samples", "3"]
    argv += ["--scheduler", "fifo", "--max-concurrent", "1"]
    argv += ["--data", str(tiny_world), "--runs-dir", str(runs_dir), "--experiment", EXPERIMENT]
    started = time.monotonic()
    status, out = _run([*argv, *on_cluster])
    seconds = time.monotonic() - started
    assert status == 0, out
    assert "3 trials: 3 finished" in out  # every trial a candidate: the summary's best is ours
    return Search(runs_dir, f"sqlite:///{runs_dir / 'mlflow.db'}", out, seconds)


@pytest.mark.slow
def test_finished_in_is_the_commands_wall_time(search: Search) -> None:
    """Registering the models (a prediction each) and closing the records count: the
    line once left them out (366 s printed for a search of 542 s)."""
    (line,) = [line for line in search.out.splitlines() if line.startswith("finished in ")]
    printed = float(line.split()[2])
    assert abs(printed - search.seconds) < 1, (line, search.seconds)


def _client(uri: str) -> MlflowClient:
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def _summary_ids(out: str) -> tuple[dict[str, str], list[str]]:
    """The summary's best trial per objective, and its Pareto front in order."""
    lines = out.splitlines()
    best = {
        f"best-{line.split()[1]}": line.split()[2].rstrip(":")
        for line in lines
        if line.startswith("best ")
    }
    start = next(i for i, line in enumerate(lines) if line.startswith("Pareto front"))
    front = []
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        front.append(line.split()[0].rstrip(":"))
    return best, front


def _trial_runs(client: MlflowClient) -> dict[str, Any]:
    found = client.get_experiment_by_name(EXPERIMENT)
    assert found is not None
    runs = client.search_runs([found.experiment_id], "tags.`search.role` = 'trial'")
    return {run.data.tags["tune.trial_id"]: run for run in runs}


def _outcomes(client: MlflowClient) -> list[TrialOutcome]:
    """The trials as the search's end saw them, read back from MLflow."""
    return [
        TrialOutcome(trial_id, {}, dict(run.data.metrics), run.data.tags["outcome"])
        for trial_id, run in _trial_runs(client).items()
    ]


@pytest.mark.slow
def test_the_aliases_name_the_trials_the_summary_calls_best(search: Search) -> None:
    client = _client(search.uri)
    best, front = _summary_ids(search.out)
    assert set(best) == {"best-retrieval", "best-semantic"} and front
    aliases = client.get_registered_model(NAME).aliases
    expected = {**best, **{f"pareto-{k}": t for k, t in enumerate(front, 1)}}
    assert set(aliases) == set(expected)
    runs = _trial_runs(client)
    for alias, trial_id in expected.items():
        version = client.get_model_version_by_alias(NAME, alias)
        run = runs[trial_id]
        assert version.tags["trial_id"] == trial_id and version.run_id == run.info.run_id
        assert version.tags["experiment"] == EXPERIMENT and version.tags["objective"] == "both"
        assert alias in version.tags["chosen_in_search"].split(", ")
        assert version.tags["smoke_test"] == "true" and len(version.tags[STORE_TAG]) == 64
        assert version.tags["semantic_sets"] == "the store's own"
        for key in (names.BEST_RETRIEVAL, names.BEST_SEMANTIC, names.FINISHED):
            assert float(version.tags[key]) == pytest.approx(run.data.metrics[key], rel=1e-5)
        # the model is an output of the trial's run, which stays as the search closed it
        assert version.source.removeprefix("models:/") in {
            o.model_id for o in run.outputs.model_outputs
        }
        assert run.info.status == "FINISHED" and run.data.tags["outcome"] == "finished"
        epochs = client.get_metric_history(run.info.run_id, "epoch")
        assert sorted(m.step for m in epochs) == [0, 1, 2]  # each epoch still once
    # one version per trial: the best on retrieval is also first on the front
    versions = client.search_model_versions(f"name = '{NAME}'")
    assert len(versions) == len(set(expected.values()))
    assert f"registered models:/{NAME}@best-retrieval" in search.out


@pytest.mark.slow
def test_the_registered_model_embeds_as_the_best_trial_did(search: Search, tmp_path: Path) -> None:
    client = _client(search.uri)
    uri = f"models:/{NAME}@best-retrieval"
    with using_tracking_uri(search.uri):  # mlflow.pyfunc.load_model reads MLflow's global URI
        model = mlflow.pyfunc.load_model(uri)
    from_list = model.predict(SENTENCES)
    from_frame = model.predict(pd.DataFrame({"sentence": SENTENCES}))
    assert from_list.dtype == np.float32 and np.array_equal(from_list, from_frame)

    by_alias = SentenceEncoder.load(uri, tracking_uri=search.uri, device="cpu")
    trial_id = client.get_model_version_by_alias(NAME, "best-retrieval").tags["trial_id"]
    run = _trial_runs(client)[trial_id]
    local = client.download_artifacts(run.info.run_id, ENSEMBLE_FILE, str(tmp_path))
    from_trial = SentenceEncoder.load(local, device="cpu").encode(SENTENCES)
    assert from_list.shape == (len(SENTENCES), by_alias.embedding_dim)
    assert np.array_equal(from_list, by_alias.encode(SENTENCES))
    assert np.array_equal(from_list, from_trial)
    assert np.array_equal(from_list, model.predict(SENTENCES))  # deterministic
    with using_tracking_uri(search.uri), pytest.raises(ValueError, match="cuda:abc"):
        mlflow.pyfunc.load_model(uri, model_config={"device": "cuda:abc"})  # reaches the model

    signature = model.metadata.signature
    # one unnamed column of any type: the model refuses what is not a string itself
    # (a column of strings would have MLflow turn 1, true and null into text first)
    assert [type(t).__name__ for t in signature.inputs.input_types()] == ["AnyType"]
    (output,) = signature.outputs.inputs
    assert output.type == np.float32 and output.shape == (-1, by_alias.embedding_dim)
    with using_tracking_uri(search.uri):  # as load_model: models:/ URIs go by the global URI
        folder = Path(mlflow.artifacts.download_artifacts(uri, dst_path=str(tmp_path / "model")))
    assert (folder / "input_example.json").is_file()
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    required = (folder / "requirements.txt").read_text().split()
    assert sorted(map(_requirement, required)) == sorted(map(_requirement, declared))


def _requirement(text: str) -> tuple[str, str]:
    parsed = Requirement(text)
    return parsed.name.lower(), str(parsed.specifier)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _post(url: str, body: dict[str, Any]) -> np.ndarray:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return np.asarray(json.loads(answer.read())["predictions"], dtype=np.float32)


def _wait_for(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert server.poll() is None, log.read_text()[-3000:]
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as answer:
            if answer.status == 200:
                return
        time.sleep(1)
    raise AssertionError(f"{url} did not answer: {log.read_text()[-3000:]}")


def _stop(server: subprocess.Popen[bytes]) -> None:
    """End the server and what it started (its own process group), and check that
    nothing of it is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(server.pid, 0)  # anything left in the group?
        except ProcessLookupError:
            return
        time.sleep(0.5)
    os.killpg(server.pid, signal.SIGKILL)
    raise AssertionError("the model server left processes behind")


@pytest.mark.slow
def test_mlflow_models_serve_answers_with_the_same_vectors(search: Search, tmp_path: Path) -> None:
    port = _free_port()
    uri = f"models:/{NAME}@best-retrieval"
    expected = SentenceEncoder.load(uri, tracking_uri=search.uri, device="cpu").encode(SENTENCES)
    # away from this checkout and without it on the path: the model brings its own code
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["MLFLOW_TRACKING_URI"] = search.uri
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    command = [sys.executable, "-m", "mlflow", "models", "serve", "-m", uri]
    command += ["--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)]
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        server = subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=sink, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        _wait_for(f"http://127.0.0.1:{port}/ping", server, log)
        invocations = f"http://127.0.0.1:{port}/invocations"
        as_inputs = _post(invocations, {"inputs": SENTENCES})
        split = {"columns": ["sentence"], "data": [[s] for s in SENTENCES]}
        as_frame = _post(invocations, {"dataframe_split": split})
    finally:
        _stop(server)
    assert as_inputs.shape == expected.shape
    np.testing.assert_allclose(as_inputs, expected, rtol=0, atol=1e-6)
    assert np.array_equal(as_inputs, as_frame)


@pytest.mark.slow
def test_the_parent_and_every_trial_record_the_store_they_read(
    search: Search, tiny_world: Path
) -> None:
    client = _client(search.uri)
    manifest = FeatureStore.open(tiny_world).manifest
    sha256 = hashlib.sha256((tiny_world / "manifest.json").read_bytes()).hexdigest()
    found = client.get_experiment_by_name(EXPERIMENT)
    assert found is not None
    (parent,) = client.search_runs([found.experiment_id], "tags.`search.role` = 'search'")
    assert parent.data.params["data_manifest_sha256"] == sha256
    counts = {n: {"images": s.images, "captions": s.captions} for n, s in manifest.splits.items()}
    trials = list(_trial_runs(client).values())
    assert len(trials) == 3
    for run, context in [(parent, "search"), *((t, "training") for t in trials)]:
        (given,) = run.inputs.dataset_inputs
        dataset = given.dataset
        assert dataset.digest == sha256[:DIGEST_LENGTH] and dataset.name == tiny_world.name
        assert dataset.source_type == "local"
        assert json.loads(dataset.source) == {"uri": str(tiny_world)}
        profile = json.loads(dataset.profile)
        assert profile["splits"] == counts and profile["manifest_sha256"] == sha256
        assert {t.key: t.value for t in given.tags} == {"mlflow.data.context": context}


@pytest.mark.slow
def test_a_search_that_ends_again_points_the_aliases_at_new_versions(
    search: Search, tmp_path: Path
) -> None:
    shutil.copy(search.runs_dir / "mlflow.db", tmp_path / "mlflow.db")  # this test's own copy
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = _client(uri)
    before = client.get_registered_model(NAME).aliases
    outcomes = _outcomes(client)
    lines: list[str] = []
    again = functools.partial(
        register_best, tracking_uri=uri, experiment=EXPERIMENT, space=SPACE,
        objective="both", write=lines.append,
    )  # fmt: skip
    versions = again(outcomes)
    assert set(versions) == set(before)
    for alias, version in versions.items():
        assert int(version) > max(map(int, before.values()))
        moved = client.get_model_version_by_alias(NAME, alias)
        was = client.get_model_version(NAME, before[alias])
        assert str(moved.version) == version
        for key in (names.BEST_RETRIEVAL, names.BEST_SEMANTIC):  # the same choice (or a tie)
            assert moved.tags[key] == was.tags[key]
    assert any(line.startswith(f"registered models:/{NAME}@") for line in lines)

    # a front of three, whatever the search found: values given here, trials real
    ids = sorted(o.trial_id for o in outcomes)
    front = [_finished(t, 50.0 - 10 * k, 0.1 + 0.1 * k) for k, t in enumerate(ids)]
    again(front)
    aliases = client.get_registered_model(NAME).aliases
    trial_of = {
        a: client.get_model_version(NAME, str(v)).tags["trial_id"] for a, v in aliases.items()
    }
    assert trial_of == {
        "best-retrieval": ids[0], "best-semantic": ids[2],
        "pareto-1": ids[0], "pareto-2": ids[1], "pareto-3": ids[2],
    }  # fmt: skip
    alone = {"best-retrieval", "best-semantic", "pareto-1"}
    held = client.get_registered_model(NAME).aliases
    assert set(again(front[:1])) == alone
    assert set(client.get_registered_model(NAME).aliases) == alone  # pareto-2, -3: removed
    for alias in ("pareto-2", "pareto-3"):  # the versions that lost them say so
        said = client.get_model_version(NAME, held[alias]).tags["replaced"]
        assert f"{alias}: removed (the pareto aliases were this search's own" in said, said


def _finished(trial_id: str, r10: float, semantic: float) -> TrialOutcome:
    metrics = {names.BEST_RETRIEVAL: r10, names.BEST_SEMANTIC: semantic, names.FINISHED: 1.0}
    return TrialOutcome(trial_id, {}, metrics, "finished")


def test_only_finished_trials_are_chosen_as_the_summary_chooses() -> None:
    def trial(trial_id: str, r10: float, semantic: float, status: str) -> TrialOutcome:
        metrics = {names.BEST_RETRIEVAL: r10, names.BEST_SEMANTIC: semantic}
        return TrialOutcome(trial_id, {}, metrics, status)

    outcomes = [
        trial("a", 50.0, 0.30, "finished"),
        trial("b", 40.0, 0.50, "finished"),
        trial("c", 30.0, 0.40, "finished"),  # dominated by b
        trial("d", 90.0, 0.90, "stopped_early"),  # better than all, but not finished
        trial("e", 99.0, 0.99, "failed"),
    ]
    finished = outcomes[:3]
    picks = choose(outcomes, "both")
    assert picks["best-retrieval"] == best_trial(finished, names.BEST_RETRIEVAL) == outcomes[0]
    assert picks["best-semantic"] == best_trial(finished, names.BEST_SEMANTIC) == outcomes[1]
    front = [finished[i] for i in pareto_front([(o.retrieval, o.semantic) for o in finished])]
    assert [picks[f"pareto-{k}"] for k in (1, 2)] == front == [outcomes[0], outcomes[1]]
    assert set(choose(outcomes, "retrieval")) == {"best-retrieval", "best-semantic"}
    assert choose(outcomes[3:], "both") == {}


def test_a_registry_that_is_away_is_one_warning_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    away = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    metrics = {names.BEST_RETRIEVAL: 50.0, names.BEST_SEMANTIC: 0.5, names.FINISHED: 45.0}
    outcomes = [TrialOutcome("a1b2c3d4_00000", {}, metrics, "finished")]
    lines: list[str] = []
    started = time.monotonic()
    found = register_best(
        outcomes, tracking_uri=away, experiment="e", space="s", objective="retrieval",
        write=lines.append,
    )  # fmt: skip
    assert found == {} and len(lines) == 1, lines
    assert lines[0].startswith(
        f"warning: the best models were not registered as 'grounded-s' in {away}"
    )
    assert time.monotonic() - started < 60
    # no finished trial: nothing to register, nothing said
    assert register_best([], tracking_uri=away, experiment="e", space="s", objective="both",
                         write=lines.append) == {} and len(lines) == 1  # fmt: skip


def _holders(client: MlflowClient, **tags: str) -> dict[str, str]:
    """The versions that hold the aliases now, their tags set to ``tags``: the registry
    as another search (its experiment, store, ...) would have left it."""
    aliases = dict(client.get_registered_model(NAME).aliases)
    for version in set(aliases.values()):
        for key, value in tags.items():
            client.set_model_version_tag(NAME, version, key, value)
    return aliases


@pytest.mark.slow
def test_an_alias_moves_only_to_a_better_comparable_model(search: Search, tmp_path: Path) -> None:
    """Each rule of the aliases (gridsearch/registry.py), on real versions of real trials
    (their values given here): the registry's state is another search's, written into
    the holders' tags as a search writes them."""
    shutil.copy(search.runs_dir / "mlflow.db", tmp_path / "mlflow.db")  # this test's own copy
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = _client(uri)
    (trial, *_) = sorted(o.trial_id for o in _outcomes(client))
    lines: list[str] = []

    def register(r10: float, semantic: float, *, smoke: bool) -> dict[str, str]:
        lines.clear()
        got = register_best(
            [_finished(trial, r10, semantic)], tracking_uri=uri, experiment=EXPERIMENT,
            space=SPACE, objective="both", write=lines.append, smoke_test=smoke,
        )  # fmt: skip
        return got

    def latest() -> Any:
        return max(client.search_model_versions(f"name = '{NAME}'"), key=lambda v: int(v.version))

    # a --smoke-test never replaces a search's model, however good its dev values
    before = _holders(client, experiment="main", smoke_test="false")
    assert register(99.0, 0.99, smoke=True) == {}
    assert dict(client.get_registered_model(NAME).aliases) == before
    new = latest()
    assert new.tags["chosen_in_search"] == "best-retrieval, best-semantic, pareto-1"
    assert "best-retrieval stays at version" in new.tags["not_aliased"]
    (said,) = [line for line in lines if "@best-retrieval at version" in line]
    assert said.startswith(f"registered version(s) {new.version} of models:/{NAME}"), lines
    assert "a --smoke-test's models never replace it" in said and "search 'main'" in said

    # a search's model replaces a --smoke-test's, even a better one
    old = _holders(client, experiment="smoke", smoke_test="true")["best-retrieval"]
    assert set(register(1.0, 0.01, smoke=False)) >= {"best-retrieval", "best-semantic"}
    taken = latest().version
    assert client.get_model_version_by_alias(NAME, "best-retrieval").version == taken
    assert "a --smoke-test's" in client.get_model_version(NAME, old).tags["replaced"]
    assert f"registered models:/{NAME}@best-retrieval (version {taken}" in lines[0], lines

    # comparable (the same store, semantic sets, objective): the better dev value wins
    _holders(client, experiment="main")
    assert register(0.5, 0.005, smoke=False) == {}  # worse than the 1.0 above
    assert client.get_model_version_by_alias(NAME, "best-retrieval").version == taken
    assert any("is at least this search's best, 0.5" in line for line in lines), lines
    assert set(register(2.0, 0.02, smoke=False)) >= {"best-retrieval", "best-semantic"}
    better = latest().version
    assert client.get_model_version_by_alias(NAME, "best-retrieval").version == better
    replaced = client.get_model_version(NAME, taken).tags["replaced"]
    assert f"best-retrieval: to version {better} (" in replaced and "2 > 1" in replaced

    # another store: not comparable, whatever the values
    _holders(client, experiment="main", data_manifest_sha256="0" * 64)
    assert register(99.0, 0.99, smoke=False) == {}
    assert client.get_model_version_by_alias(NAME, "best-retrieval").version == better
    assert any("trained on another store (data manifest sha256 000000000000" in x for x in lines)


@pytest.mark.slow
def test_a_smoke_test_after_a_search_in_its_runs_directory_leaves_the_aliases(
    search: Search, tiny_world: Path, tmp_path: Path, on_cluster: list[str]
) -> None:
    """The module's search stands for the real one (its versions marked as a search's,
    as a search without --smoke-test writes them), in a copy of its runs directory; a
    --smoke-test of the same space there, as small as a search gets (one trial, one
    epoch), registers its version, leaves every alias where it was, and says where and
    why: "use the best model" still means the search's."""
    runs = tmp_path / "runs"
    shutil.copytree(search.runs_dir, runs)
    uri = f"sqlite:///{runs / 'mlflow.db'}"
    client = _client(uri)
    before = _holders(client, smoke_test="false")
    argv = ["--space", SPACE, *SMOKE, "--objective", "both", "--num-samples", "1"]
    argv += ["--epochs", "1", "--scheduler", "fifo", "--data", str(tiny_world)]
    started = time.monotonic()
    status, out = _run([*argv, "--runs-dir", str(runs), "--experiment", "smoke", *on_cluster])
    seconds = time.monotonic() - started
    assert status == 0, out
    assert dict(client.get_registered_model(NAME).aliases) == before
    new = max(client.search_model_versions(f"name = '{NAME}'"), key=lambda v: int(v.version))
    assert new.tags["experiment"] == "smoke" and new.tags["smoke_test"] == "true"
    said = [line for line in out.splitlines() if "] registered version(s) " in line]  # stamped
    assert said and all(f"{new.version} of models:/{NAME}" in line for line in said), out
    for alias, version in before.items():  # every alias said, where it stays
        assert any(f"@{alias} at version {version}" in line for line in said), said
    assert all("a --smoke-test's models never replace it" in line for line in said)
    assert f"registered models:/{NAME}@" not in out  # no alias said to move
    print(f"the smoke search after the search: {seconds:.1f} s")  # measured, -s shows it


@pytest.mark.slow
def test_encode_takes_the_run_names_compare_takes_and_never_a_copys_original(
    search: Search, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``trainables.encode --model`` takes a trial's whole run name (``trial-<id> lr_min=...``,
    as ``analysis.compare`` does), its first word, its run id and trial id. In a copy of
    the runs directory not resumed since, whose store still names the original's files,
    every lookup is refused in one line naming both (the model would be the original's);
    once the copy is resumed (a finished search only takes the move in), its own."""
    client = _client(search.uri)
    run = next(iter(_trial_runs(client).values()))
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("\n".join(SENTENCES[:2]) + "\n")

    def encode(model: str, uri: str) -> tuple[int, str]:
        out = tmp_path / "out.npy"
        argv = ["--model", model, "--tracking-uri", uri, "--input", str(sentences)]
        code = encode_main([*argv, "--output", str(out), "--device", "cpu"])
        return code, capsys.readouterr().err

    name = str(run.info.run_name)
    assert " " in name and "=" in name, name  # what it tried is part of its name
    assert find_run(client, name).info.run_id == run.info.run_id  # analysis.compare's lookup
    for ref in (name, name.split(" ")[0], run.info.run_id, run.data.tags["tune.trial_id"]):
        code, err = encode(ref, search.uri)
        assert code == 0 and "error" not in err, (ref, err)  # (MLflow's download bar aside)

    copy = tmp_path / "copy"
    shutil.copytree(search.runs_dir, copy)
    uri = f"sqlite:///{copy / 'mlflow.db'}"
    refs = (name, f"models:/{NAME}@best-retrieval", f"runs:/{run.info.run_id}/{ENSEMBLE_FILE}")
    for ref in refs:
        code, err = encode(ref, uri)
        assert code == 2 and err.count("\n") == 1, (ref, err)
        assert f"is a copy or move of {search.runs_dir} not resumed since" in err, (ref, err)
    assert main(["--experiment", EXPERIMENT, "--resume", "--runs-dir", str(copy)]) == 0
    assert "nothing to run" in capsys.readouterr().err
    # in a process of its own: this one's MLflow keeps the copy's database as it first
    # opened it (the file the resume replaced)
    output = ["--input", str(sentences), "--output", str(tmp_path / "o.npy"), "--device", "cpu"]
    calls = [["--model", ref, "--tracking-uri", uri, *output] for ref in refs]
    script = (
        f"from trainables.encode import main\nfor argv in {calls!r}:\n    assert main(argv) == 0\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, check=False, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
def test_a_resume_after_a_hard_stop_keeps_finished_trials_finished(
    search: Search, tmp_path: Path, on_cluster: list[str]
) -> None:
    """A second Ctrl+C after a trial finished skips Tune's last save: its experiment state
    says the trial runs, at an epoch long past (its result.json too), whose checkpoint
    from then is gone, and the searcher's state (of the same save) counts it as running
    (one at a time: no next trial would ever be suggested). Here that state, made from the
    module's finished search in a copy; ``--resume --num-samples 4`` (which extends it by
    a trial, then registers the models) runs no finished trial again: the trial's newest
    checkpoint says it finished, which is said in a line and told to the searcher, and
    the new trial runs."""
    runs = tmp_path / "runs"
    shutil.copytree(search.runs_dir, runs)
    experiment = runs / "tune" / EXPERIMENT
    (state,) = experiment.glob("experiment_state-*.json")
    saved = json.loads(state.read_text())
    trial, metadata = (json.loads(part) for part in saved["trial_data"][0])
    folder = experiment / trial["relative_logdir"]
    first = (folder / "result.json").read_text().splitlines()[0]
    (folder / "result.json").write_text(first + "\n")  # as Tune last copied it
    trial["status"], metadata["last_result"] = "RUNNING", json.loads(first)
    # its checkpoints then: the first (gone since, as Tune keeps the last two), not the last
    # (the state names the original's folder: the copy is moved in when resumed)
    named = search.runs_dir / "tune" / EXPERIMENT / trial["relative_logdir"]
    last, gone = sorted(named.glob("checkpoint_*"))[-1], named / "checkpoint_000000"
    manager = metadata["checkpoint_manager"]
    data = bytes.fromhex(manager["value"])
    assert str(last).encode() in data and not gone.exists()
    manager["value"] = rebase_pickle(data, last, gone).hex()
    saved["trial_data"][0] = [json.dumps(trial), json.dumps(metadata)]
    state.write_text(json.dumps(saved))
    (generator,) = experiment.glob("search_gen_state-*.json")  # a pickle (Tune's own file)
    limiter_state = pickle.loads(generator.read_bytes())
    limiter = limiter_state["name:ConcurrencyLimiter"]
    limiter["live_trials"].add(trial["trial_id"])
    limiter["num_unfinished_live_trials"] = len(limiter["live_trials"])
    generator.write_bytes(pickle.dumps(limiter_state))
    client = _client(f"sqlite:///{runs / 'mlflow.db'}")
    found = client.get_experiment_by_name(EXPERIMENT)
    assert found is not None
    (parent,) = client.search_runs([found.experiment_id], "tags.`search.role` = 'search'")
    client.set_tag(parent.info.run_id, "outcome", "interrupted")  # as the stop closed it
    client.set_terminated(parent.info.run_id, "KILLED")
    (cut,) = client.search_runs(
        [found.experiment_id], f"tags.`tune.trial_id` = '{trial['trial_id']}'"
    )
    client.set_tag(cut.info.run_id, "outcome", "search_ended")  # the stop closed it cut short
    client.set_terminated(cut.info.run_id, "KILLED")
    artifacts = Path(cut.info.artifact_uri.removeprefix("file://")).parts
    at = artifacts.index("mlartifacts")
    ensemble = runs.joinpath(*artifacts[at:]) / ENSEMBLE_FILE
    original = load_ensemble(ensemble)
    ensemble.unlink()  # written anew, from the checkpoint it ended at
    argv = ["--experiment", EXPERIMENT, "--resume", "--runs-dir", str(runs), "--num-samples"]
    started = time.monotonic()
    # a process of its own, with a time limit: a searcher left waiting hangs Tune for good
    done = subprocess.run(
        [sys.executable, "-m", "gridsearch.run", *argv, "4", *on_cluster],
        capture_output=True, text=True, cwd=ROOT, timeout=600, check=False,
    )  # fmt: skip
    seconds = time.monotonic() - started
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert f"Tune's last save said running ({trial['trial_id']}): kept as finished" in out
    starts = [line for line in out.splitlines() if "] start " in line]
    assert len(starts) == 1 and trial["trial_id"] not in starts[0], out  # the new one only
    assert "Traceback" not in out, out
    assert "4 trials: 4 finished" in out and f"registered models:/{NAME}@" in out, out
    forget_database(runs / "mlflow.db")  # the resume (moving it in) replaced the file
    closed = client.get_run(cut.info.run_id)  # closed again as it ended, with its ensemble
    assert closed.info.status == "FINISHED" and closed.data.tags["outcome"] == "finished"
    local = client.download_artifacts(cut.info.run_id, ENSEMBLE_FILE, str(tmp_path))
    again = load_ensemble(local)
    assert again.complete and again.epochs == original.epochs  # its end's, not an earlier
    print(f"the resume after a hard stop, extended by a trial: {seconds:.1f} s")  # -s shows it
