"""The C++ per-step loops: built by the processes that may take the time (a search's
driver, the train CLI, ``python -m trainables.cpp_loop``), once per key; never by a
trial or a model load, which run the Python loop where it is not built; found by a
second clone of the project without building or waiting. The session fixture
``cpp_recurrence`` (tests/conftest.py) built it in the user's cache, as a driver would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from filelock import FileLock

from trainables import _compiled, _packed_rnn_cpp

REPO = Path(__file__).resolve().parents[2]


def _child(
    code: str, env: dict[str, str], cwd: Path = REPO, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False,
    )  # fmt: skip


CHECK = """
    import warnings
    warnings.simplefilter("always")
    import torch
    from torch.nn.utils.rnn import pack_padded_sequence
    from trainables import _packed_rnn, _packed_rnn_cpp, prebuild_cpp_loop
    if PREBUILD:
        prebuild_cpp_loop(print)
    rnn = torch.nn.GRU(3, 4, bidirectional=True)
    packed = pack_padded_sequence(torch.randn(5, 2, 3), torch.tensor([5, 3]))
    out = _packed_rnn.packed_bidirectional(packed.data, packed.batch_sizes, rnn)
    out.sum().backward()
    print("built" if _packed_rnn_cpp.extension() is not None else "python",
          _packed_rnn._loop(None, packed.data))
"""


def _check(prebuild: bool) -> str:
    return textwrap.dedent(CHECK).replace("PREBUILD", str(prebuild))


def test_the_extension_is_built_here_and_is_the_default() -> None:
    assert _packed_rnn_cpp.extension() is not None  # this machine has a C++ compiler
    published = _compiled.folder(_packed_rnn_cpp._extension())
    assert Path(_packed_rnn_cpp.extension().__file__).parent == published  # type: ignore[union-attr]


def test_training_where_it_is_not_built_runs_python_and_never_builds(tmp_path: Path) -> None:
    """A trial or a model load (here: training a packed GRU) in an empty extensions
    folder: the Python loop, one warning that says how to build it, nothing compiled."""
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path)}
    started = time.monotonic()
    done = _child(_check(prebuild=False), env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["python", "python"]
    warned = [line for line in done.stderr.splitlines() if "is not built" in line]
    assert len(warned) == 1 and "python -m trainables.cpp_loop" in warned[0], done.stderr
    assert not any(tmp_path.iterdir())  # nothing built, not even a folder made
    assert time.monotonic() - started < 30  # a build takes 20 s and more


def test_without_a_compiler_the_build_says_why_once_and_training_uses_python(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path), "CXX": str(tmp_path / "no-cxx")}
    done = _child(_check(prebuild=True), env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1].split() == ["python", "python"]
    said = [line for line in lines if "could not be built" in line]
    assert len(said) == 1 and "--recurrence python" in said[0], done.stdout
    assert "RuntimeWarning" not in done.stderr  # said once, by the build


@pytest.mark.slow  # 5 s or more in the fast tier (BENCHMARKS.md)
def test_a_config_saying_python_runs_the_python_loop_without_looking(
    tmp_path: Path, tiny_world: Path
) -> None:
    """``recurrence`` "python" (``--recurrence python``): a trainer built from that config
    trains through the Python loop in an empty extensions folder, without a warning, and
    nothing is built; the config is what the run records."""
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path)}
    code = f"""
        import warnings
        warnings.simplefilter("error", RuntimeWarning)  # the not-built warning fails it
        from trainables import _packed_rnn, _packed_rnn_cpp
        from trainables.config import SMOKE, TrainConfig
        from trainables.data import TrainingData
        from trainables.loop import Trainer
        config = TrainConfig.from_dict({{**SMOKE, "device": "cpu", "recurrence": "python"}})
        trainer = Trainer(config, TrainingData.from_store({str(tiny_world)!r}))
        trainer.train_one_epoch()
        weight = trainer.model.image_encoder.linear.weight  # a float32 CPU tensor
        print(_packed_rnn_cpp.extension(), _packed_rnn._loop(None, weight))
    """
    done = _child(code, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "python"]
    assert "is not built" not in done.stderr
    assert not any(tmp_path.iterdir())  # nothing was built


def _name() -> str:
    """The build's folder name: the prefix and a digest of what it is compiled from."""
    return _compiled.folder(_packed_rnn_cpp._extension()).name


def test_the_build_name_follows_the_source_and_the_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    name = _name()
    assert name.startswith("grounded_packed_rnn_") and name == _name()
    monkeypatch.setattr(_packed_rnn_cpp, "FLAGS", [*_packed_rnn_cpp.FLAGS, "-g"])
    assert _name() != name


CLONE = """
    import json, time, trainables
    from trainables import _compiled, _packed_rnn_cpp, prebuild_cpp_loop
    started = time.monotonic()
    said = []
    module = prebuild_cpp_loop(said.append)
    seconds = time.monotonic() - started
    print(json.dumps([trainables.__file__, _compiled.folder(_packed_rnn_cpp._extension()).name,
                      module is not None, said,
                      seconds]))
"""


def _clone(into: Path) -> Path:
    """A copy of the project's packages, as another checkout would hold them."""
    skip = shutil.ignore_patterns("__pycache__")
    for package in ("storage", "trainables"):
        shutil.copytree(REPO / package, into / package, ignore=skip)
    return into


@pytest.mark.slow
def test_a_second_clone_finds_the_build_without_compiling_or_waiting(tmp_path: Path) -> None:
    """Two clones of the project on one machine, one of which built the recurrence
    (this one: the session fixture; copied into a fresh extensions folder): the other,
    with another path, finds it under the same key, loads it while the key's build lock
    is held (a reader never takes it) and prints nothing; a clone whose source differs
    is another key, and leaves the build alone."""
    ours = _compiled.folder(_packed_rnn_cpp._extension())
    extensions = tmp_path / "extensions"
    shutil.copytree(ours, extensions / ours.name, ignore=shutil.ignore_patterns("build-*"))
    before = (extensions / ours.name / _compiled.LOG).read_text()
    first, second = _clone(tmp_path / "a"), _clone(tmp_path / "b")
    (second / "trainables" / "_packed_rnn.cpp").write_text(
        (REPO / "trainables" / "_packed_rnn.cpp").read_text() + "// another clone's edit\n"
    )
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(extensions), "PYTHONPATH": str(first)}
    with FileLock(extensions / ours.name / ".lock", timeout=0):  # as a builder would hold it
        done = _child(CLONE, env, cwd=first, timeout=60)
    assert done.returncode == 0, done.stderr
    where, name, loaded, said, seconds = json.loads(done.stdout)
    assert where == str(first / "trainables" / "__init__.py")  # the clone's own code
    assert (name, loaded, said) == (ours.name, True, [])  # the same key, found, not a word
    assert seconds < 10  # neither compiled (20 s and more) nor waited on the held lock
    assert (extensions / ours.name / _compiled.LOG).read_text() == before  # not built again

    code = (
        "from trainables import _compiled, _packed_rnn_cpp\n"
        "print(_compiled.folder(_packed_rnn_cpp._extension()).name)"
    )
    other = _child(code, {**env, "PYTHONPATH": str(second)}, cwd=second, timeout=60)
    assert other.returncode == 0, other.stderr
    assert other.stdout.strip().startswith("grounded_packed_rnn_") and other.stdout.strip() != (
        ours.name
    )


def test_the_command_prints_the_built_file_and_rejects_bad_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from trainables.cpp_loop import main

    assert main([]) == 0
    out, err = capsys.readouterr()
    assert Path(out.strip()).parent == _compiled.folder(_packed_rnn_cpp._extension())
    assert err == ""  # built already: not a word
    with pytest.raises(SystemExit) as stop:
        main(["--now"])
    assert stop.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: unrecognized arguments: --now")


# Threads that ask for the built module at once, in a fresh process (a module is imported
# once per process), each step of the import slowed down through the interpreter's own
# profiling hook: created (create_dynamic) and run (exec_dynamic) 50 ms apart, so that
# without the lock every thread creates its module before the first is run. A pybind11
# module run a second time finds the first, finished one and leaves its own empty: before
# the lock the later threads got a module without gru_forward, every time with this hook.
FIRST_USE = """
    import sys, threading, time
    from trainables import _compiled, _packed_rnn_cpp
    extension = _packed_rnn_cpp._extension()
    _compiled.folder(extension)  # the key (it runs the compiler): outside the race
    THREADS = 4
    def slowed(frame, event, arg):
        if event == "c_return" and getattr(arg, "__name__", "") in (
            "create_dynamic", "exec_dynamic"
        ):
            time.sleep(0.05)
    ask = {
        "extension": _packed_rnn_cpp.extension,
        "load": lambda: _compiled.load(extension),
    }[sys.argv[1]]
    barrier = threading.Barrier(THREADS)
    got = []
    def first_use():
        barrier.wait()
        got.append(ask())
    threading.setprofile(slowed)
    threads = [threading.Thread(target=first_use) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(len(got), len({id(m) for m in got}), all(hasattr(m, "gru_forward") for m in got))
"""


def test_threads_using_the_compiled_loops_first_at_once_all_get_them_whole() -> None:
    """``extension()`` (its cache) and ``_compiled.load`` (the import itself), each from
    four threads at once, in fresh processes, twice each: one module, whole, for
    every thread."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = textwrap.dedent(FIRST_USE)
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    runs = [
        subprocess.Popen([sys.executable, "-c", code, way], cwd=REPO, env=env, **pipes)
        for way in ("extension", "load") * 2
    ]
    for process in runs:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-2000:]
        assert out.split() == ["4", "1", "True"], (process.args[-1], out, err[-2000:])
