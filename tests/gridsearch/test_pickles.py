"""A pickle read back from a runs directory is walked, never run, and refused when it would
import or call anything outside what the search's own state holds. Each hostile payload
here is real: unpickled, it writes a marker file (shown once per payload), and the walk
refuses it alone, nested in a legitimate container or object, prefixed to a legitimate
stream, inside a pickle inside it, and in each policy's files; what the libraries
themselves pickle (Optuna's objects, numpy's arrays and generators, enums, torch
tensors) passes."""

from __future__ import annotations

import binascii
import datetime
import io
import json
import os
import pathlib
import pickle
import pickletools
import subprocess
import zipfile
from collections import OrderedDict, deque
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import optuna
import pytest
import torch

from gridsearch._pickle_policies import STATE, TORCH
from gridsearch._pickles import json_problem, pickle_problem


class _Payload:
    """A pickle that calls ``call(*args)`` when loaded."""

    def __init__(self, call: Any, *args: Any) -> None:
        self.call, self.args = call, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.call, self.args


def _payloads(marker: Path) -> dict[str, tuple[_Payload, str]]:
    """Each hostile payload, and the global the refusal names."""
    touch = f"import pathlib; pathlib.Path({str(marker)!r}).touch()"
    return {
        "builtins.open": (_Payload(open, str(marker), "w"), "io.open"),
        "os.system": (_Payload(os.system, f"touch '{marker}'"), f"{os.system.__module__}.system"),
        "subprocess": (_Payload(subprocess.run, ["touch", str(marker)]), "subprocess.run"),
        "eval": (_Payload(eval, f"exec({touch!r})"), "builtins.eval"),
        "exec": (_Payload(exec, touch), "builtins.exec"),
        "getattr": (_Payload(getattr, 0, "real"), "builtins.getattr"),  # an attribute of anything
    }


PAYLOADS = ["builtins.open", "os.system", "subprocess", "eval", "exec", "getattr"]


def _prefixed(payload: bytes, legitimate: bytes) -> bytes:
    """``payload``'s call, its result dropped, then the whole ``legitimate`` stream: the
    same object loads, and the call has run."""
    call = pickletools.optimize(payload)[2:-1]  # no PROTO, no STOP, no memo
    return b"\x80\x04" + call + b"0" + legitimate[2:]


def _legitimate() -> Any:
    study = optuna.create_study(directions=["maximize"])
    study.enqueue_trial({"margin": 0.2})
    return {
        "config": {"margin": 0.2, "hidden_size": 8, "path": pathlib.PurePosixPath("/r/tune")},
        "when": datetime.datetime(2026, 1, 1, 12),
        "queue": deque([1, 2]),
        "ordered": OrderedDict(a=1),
        "array": np.arange(6, dtype=np.float32).reshape(2, 3),
        "scalar": np.float64(0.5),
        "rng": np.random.RandomState(0),
        "distribution": optuna.distributions.FloatDistribution(0.1, 0.3),
        "direction": optuna.study.StudyDirection.MAXIMIZE,
        "state": optuna.trial.TrialState.COMPLETE,
        "sampler": optuna.samplers.TPESampler(seed=0),
        "set": {1, 2},
    }


@pytest.mark.parametrize("protocol", [4, 5])  # Python's, cloudpickle's (Tune's, Optuna's)
def test_what_the_libraries_pickle_passes(protocol: int) -> None:
    data = pickle.dumps(_legitimate(), protocol=protocol)
    assert pickle_problem(data, STATE) is None
    assert pickle_problem(cloudpickle.dumps(_legitimate()), STATE) is None


@pytest.mark.parametrize("name", PAYLOADS)
def test_a_payload_runs_when_loaded_and_is_refused_alone_nested_and_prefixed(
    tmp_path: Path, name: str
) -> None:
    marker = tmp_path / "ran"
    payload, named = _payloads(marker)[name]
    data = pickle.dumps(payload, protocol=4)
    if name != "getattr":  # a getattr only fetches: what it fetches is what would run
        pickle.loads(data)
        assert marker.exists(), "the payload is not live: this test would prove nothing"
        marker.unlink()
    assert pickle_problem(data, STATE) == f"import {named}"
    legitimate = _legitimate()
    nested = {"trials": [{"config": {"margin": 0.2, "sub": [1, payload]}}]}
    distribution = optuna.distributions.FloatDistribution(0.1, 0.3)
    distribution.__dict__["low"] = payload  # inside an object the policy rebuilds
    for protocol in (4, 5):
        for hostile in ({**legitimate, "x": nested}, [distribution], (legitimate, payload)):
            found = pickle_problem(pickle.dumps(hostile, protocol=protocol), STATE)
            assert found == f"import {named}", (protocol, found)
    prefixed = _prefixed(data, pickle.dumps(legitimate, protocol=4))
    assert pickle_problem(prefixed, STATE) == f"import {named}"
    inner = pickle.dumps({"blob": data, "hex": binascii.hexlify(data).decode()}, protocol=4)
    assert pickle_problem(inner, STATE) == f"import {named} (in a pickle inside it)"
    assert not marker.exists()


def test_calls_the_policy_only_names_are_refused() -> None:
    """A name the state may hold but not call (a space's function, a clock, a class
    whose state it restores) is refused as the callable of a call; an enum of the
    libraries is looked up; the result of a call is never called."""
    from gridsearch import spaces

    define_by_run = spaces.__dict__[next(n for n in vars(spaces) if n.startswith("_margin"))]
    assert pickle_problem(pickle.dumps(define_by_run), STATE) is None  # named
    called = _Payload(define_by_run, None)
    assert pickle_problem(pickle.dumps(called), STATE) == f"call {spaces.__name__}._margin_sweep"
    clock = _Payload(__import__("time").monotonic)
    assert pickle_problem(pickle.dumps(clock), STATE) == "call time.monotonic"
    sampler = _Payload(optuna.samplers.TPESampler, 0)  # __init__ with arguments: a call
    assert pickle_problem(pickle.dumps(sampler), STATE) == (
        "call optuna.samplers._tpe.sampler.TPESampler"
    )
    direction = _Payload(optuna.study.StudyDirection, 2)
    assert pickle_problem(pickle.dumps(direction), STATE) is None
    twice = _Payload(_Payload(datetime.datetime, 2026, 1, 1).__reduce__()[0], 2026, 1, 1)
    assert pickle_problem(pickle.dumps(twice), STATE) is None  # a datetime
    handmade = b"\x80\x04\x8c\x08datetime\x8c\x08datetime\x93K\x01\x85R)R."  # call(call())
    assert pickle_problem(handmade, STATE) == "call what a call of datetime.datetime returned"


def test_code_rebuilt_by_cloudpickle_is_refused() -> None:
    """cloudpickle saves what lives in ``__main__`` (a lambda, a class made at run
    time: Tune's error classes) as code, which loading runs."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec("def say(line):\n    print(line, flush=True)\n", namespace)  # as `python -m` has it
    found = pickle_problem(cloudpickle.dumps(namespace["say"]), STATE)
    assert found is not None and found.startswith("import cloudpickle.cloudpickle._")
    error_class = type("RayTaskError(ValueError)", (ValueError,), {"__module__": "__main__"})
    found = pickle_problem(cloudpickle.dumps(error_class("diverged")), STATE)
    assert found is not None and "rebuilt from pickled code" in found
    ray_pickled = (
        b"\x80\x05\x8c\x1bray.cloudpickle.cloudpickle\x8c\r_builtin_type\x93\x8c\x08CodeType\x85R."
    )
    assert pickle_problem(ray_pickled, STATE) == "build types.CodeType (code from the pickle)"


def test_tune_s_hex_fields_in_the_experiment_state_are_walked(tmp_path: Path) -> None:
    """Tune's experiment state is JSON whose trials' fields are cloudpickled values,
    hex-encoded, inside JSON strings inside it; Tune unpickles them when it loads."""
    hostile = pickle.dumps(_payloads(tmp_path / "ran")["os.system"][0])
    fine = pickle.dumps({"results": [1.0, 2.0]})
    for value in (hostile, fine):
        trial = {"trial_id": "a", "results": binascii.hexlify(value).decode(),
                 "storage": {"_type": "CLOUDPICKLE_FALLBACK", "value": fine.hex()}}  # fmt: skip
        state = {"trial_data": [[json.dumps(trial), "{}"]], "runner_data": {}}
        found = json_problem(json.dumps(state), STATE)
        assert found == (None if value is fine else f"import {os.system.__module__}.system")
    assert json_problem("{not json", STATE) is None  # the damage checks name it


def _torch_data_pkl(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    with zipfile.ZipFile(buffer) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith("/data.pkl")]
        return archive.read(name)


def test_a_checkpoint_holds_tensors_only(tmp_path: Path) -> None:
    state = {
        "model": OrderedDict(w=torch.zeros(2, 3), b=torch.ones(3, dtype=torch.float64)),
        "rng": {"torch": torch.get_rng_state()},
        "epoch": 2,
        "config": {"margin": 0.2},
    }
    assert pickle_problem(_torch_data_pkl(state), TORCH) is None
    hostile = {**state, "x": _payloads(tmp_path / "ran")["builtins.open"][0]}
    assert pickle_problem(_torch_data_pkl(hostile), TORCH) == "import io.open"
    # a plain state file holds no persistent ids (a torch file's tensors)
    by_id = pickle_problem(_torch_data_pkl(state), STATE)
    assert by_id is not None and by_id.startswith("import torch.")
    assert pickle_problem(b"\x80\x04K\x01Q.", STATE) == (
        "load a persistent id (not a plain state file)"
    )
