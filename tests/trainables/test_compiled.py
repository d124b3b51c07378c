"""Keyed builds (``trainables._compiled``) on a tiny extension of plain C (no torch
headers: it compiles in about a second), each process a real one: a key is built once,
a second process loads it without taking the lock a builder holds, so does another clone
of the project in its own virtual environment, two builders of one key compile it once
(the second says what it waits for), and anything the module is compiled from changes the
key."""

from __future__ import annotations

import json
import shutil
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from filelock import FileLock

from tests.processes import finish
from trainables import _compiled

REPO = Path(__file__).resolve().parents[2]

TINY = """
#include <Python.h>
#define NAME_(x) #x
#define NAME(x) NAME_(x)
#define INIT_(x) PyInit_##x
#define INIT(x) INIT_(x)
static struct PyModuleDef tiny = {PyModuleDef_HEAD_INIT, NAME(TORCH_EXTENSION_NAME), 0, -1, 0};
PyMODINIT_FUNC INIT(TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&tiny); }
"""

BUILD = """
    import sys, time
    from pathlib import Path
    from trainables import _compiled
    tiny = _compiled.Extension("tiny", Path(sys.argv[1]), ("-O0",))
    started = time.monotonic()
    if sys.argv[2] == "load":
        module = _compiled.load(tiny)
    else:
        module = _compiled.build(tiny, lambda line: print(line, flush=True), "the tiny module")
    print("module", module.__name__ if module else None, round(time.monotonic() - started, 1))
"""


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> _compiled.Extension:
    """The tiny extension, built under a fresh ``TORCH_EXTENSIONS_DIR`` (here and in the
    processes started)."""
    source = tmp_path / "tiny.cpp"
    source.write_text(TINY)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "extensions"))
    return _compiled.Extension("tiny", source, ("-O0",))


def _start(extension: _compiled.Extension, how: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(BUILD), str(extension.source), how],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _run(extension: _compiled.Extension, how: str = "build") -> list[str]:
    process = _start(extension, how)
    out = process.communicate(timeout=300)[0]
    assert process.returncode == 0, out
    return out.splitlines()


def _builds(folder: Path) -> list[str]:
    log = folder / _compiled.LOG
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.slow
def test_a_key_is_built_once_and_then_loaded_without_the_lock(tiny: _compiled.Extension) -> None:
    folder = _compiled.folder(tiny)
    first = _run(tiny)
    assert first[0].startswith(f"building the tiny module for this machine into {folder}")
    assert first[-1].startswith(f"module {folder.name} ")
    assert len(_builds(folder)) == 1
    with FileLock(folder / ".lock", timeout=0):  # a builder of this key holds it
        for how in ("load", "build"):
            (line,) = _run(tiny, how)  # not a word: found, loaded
            name, seconds = line.split()[1:]
            assert name == folder.name and float(seconds) < 5, line
    assert len(_builds(folder)) == 1
    assert not list(folder.glob("build-*"))  # the work folder went with the build


def test_two_builders_of_one_key_compile_it_once(tiny: _compiled.Extension) -> None:
    folder = _compiled.folder(tiny)
    folder.mkdir(parents=True)
    lock = FileLock(folder / ".lock", timeout=0)
    lock.acquire()  # held by "another process" while both start
    (folder / ".builder").write_text("pid 1 on elsewhere (since 12:00:00)\n")
    builders = [_start(tiny, "build") for _ in range(2)]
    outputs: list[list[str]] = [[], []]
    for process, out in zip(builders, outputs, strict=True):
        assert process.stdout is not None
        out.append(process.stdout.readline())  # each says what it waits for, at once
    lock.release()
    for process, out in zip(builders, outputs, strict=True):
        out += finish(process, 300)[0].splitlines(keepends=True)
        assert process.returncode == 0, out
    for out in outputs:
        assert out[0].startswith("waiting for pid 1 on elsewhere (since 12:00:00), which is "
                                 f"building the tiny module in {folder}"), out  # fmt: skip
        assert out[-1].startswith(f"module {folder.name} ")
    built = [out for out in outputs if any(line.startswith("building") for line in out)]
    assert len(built) == 1 and len(_builds(folder)) == 1  # one compiled, the other loaded


def test_what_it_is_compiled_from_makes_the_key(
    tiny: _compiled.Extension, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    extension = tiny
    name = _compiled.folder(extension).name
    clone = tmp_path / "clone" / "tiny.cpp"  # the same bytes at another path: another clone's
    clone.parent.mkdir()
    clone.write_text(TINY)
    assert _compiled.folder(extension._replace(source=clone)).name == name
    edited = tmp_path / "edited.cpp"
    edited.write_text(TINY + "// edited\n")
    others = [
        extension._replace(source=edited),
        extension._replace(flags=("-O1",)),
    ]
    assert len({name, *(_compiled.folder(other).name for other in others)}) == 3
    parts = _compiled.key_parts(extension)
    assert set(parts) == {"source", "flags", "torch", "python", "compiler", "cpu"}
    monkeypatch.setenv("CXX", "clang++-that-is-not-here")
    assert _compiled.key_parts(extension)["compiler"] != parts["compiler"]


@pytest.mark.slow  # six interpreters with torch and three builds: 10-17 s
def test_a_reader_never_sees_half_a_build(tiny: _compiled.Extension) -> None:
    """Until the manifest names the module, there is nothing to load (a builder that
    died mid-way leaves a work folder and no manifest; the next builder removes it)."""
    folder = _compiled.folder(tiny)
    (folder / "build-elsewhere-1").mkdir(parents=True)
    (folder / f"{folder.name}.so").write_bytes(b"half")
    (line,) = _run(tiny, "load")
    assert line.split()[1] == "None"
    built = _run(tiny)
    assert built[-1].startswith(f"module {folder.name} ") and not list(folder.glob("build-*"))
    # a published build whose module went (a cache cleaner) or was damaged is no build
    # either: loading finds nothing, the next builder builds it again
    module = folder / json.loads((folder / _compiled.MANIFEST).read_text())["file"]
    for damage in (module.unlink, lambda: module.write_bytes(b"not a module")):
        damage()
        (line,) = _run(tiny, "load")
        assert line.split()[1] == "None"
        assert _run(tiny)[-1].startswith(f"module {folder.name} ")
    assert len(_builds(folder)) == 3


@pytest.mark.slow  # 5 s or more in the fast tier (BENCHMARKS.md)
def test_another_clone_in_another_venv_loads_the_build_without_a_word(
    tiny: _compiled.Extension, tmp_path: Path
) -> None:
    """The issue's lab server: two clones of the project, each with its own virtual
    environment, one home (one extensions folder). What the first built, the second finds
    at once, without building and without waiting, even while a builder of the key holds
    its lock."""
    folder = _compiled.folder(tiny)
    _run(tiny)  # this clone, this venv: built
    clone = tmp_path / "clone"
    for package in ("trainables", "storage"):  # what trainables._compiled imports
        shutil.copytree(REPO / package, clone / package, ignore=shutil.ignore_patterns("*.pyc"))
    (clone / "tiny.cpp").write_text(TINY)  # the same source, at the other clone's path
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (found,) = venv.glob("lib/python*/site-packages")
    (found / "shared.pth").write_text("\n".join(site.getsitepackages()) + "\n")  # torch
    script = BUILD + "    print('from', _compiled.__file__, sys.prefix)\n"
    with FileLock(folder / ".lock", timeout=0):  # a builder of this key holds it
        done = subprocess.run(
            [venv / "bin" / "python", "-c", textwrap.dedent(script), "tiny.cpp", "build"],
            cwd=clone, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    # not a word of building or waiting; a wait would never end (the lock is held until
    # the process is done) and a build would be a second in the log, so no clock is read:
    # under a loaded machine's load even the key's compiler check took 5 s
    loaded, where = done.stdout.splitlines()
    assert loaded.split()[1] == folder.name, loaded
    assert where == f"from {clone / 'trainables' / '_compiled.py'} {venv}", where
    assert len(_builds(folder)) == 1


def test_looking_up_the_build_folder_says_nothing_on_a_machine_without_a_gpu(
    tmp_path: Path,
) -> None:
    """torch logs "No CUDA runtime is found" when its extension module is imported on a
    machine whose CUDA_HOME exists but has no GPU: a driver's first lines must not carry
    it (a CPU run is no news)."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "TORCH_EXTENSIONS_DIR"}
    env["CUDA_HOME"] = str(tmp_path)  # a CUDA_HOME that exists, the case torch warns of
    code = "from trainables import _compiled; print(_compiled.root())"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
        check=False, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() and "CUDA" not in done.stderr, done.stderr


def test_a_manifest_naming_anything_but_its_own_module_is_no_build(
    tiny: _compiled.Extension, tmp_path: Path
) -> None:
    """The shared folder's key.json read back: a module of another name, a file outside
    the folder or of another name, or a manifest of another shape is no build (the next
    builder builds again); nothing it names is imported (in this process: none was)."""
    folder = _compiled.folder(tiny)
    _run(tiny)
    manifest = json.loads((folder / _compiled.MANIFEST).read_text())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(folder / manifest["file"], elsewhere / manifest["file"])
    hostile = [
        {**manifest, "module": "os"},
        {**manifest, "file": str(elsewhere / manifest["file"])},
        {**manifest, "file": f"../elsewhere/{manifest['file']}"},
        {**manifest, "file": ".hidden.so"},
        {**manifest, "file": 7},
        [manifest],
        "[" * 100_000,
    ]
    for case in hostile:
        text = case if isinstance(case, str) else json.dumps(case)
        (folder / _compiled.MANIFEST).write_text(text)
        assert _compiled.load(tiny) is None, case
        assert folder.name not in sys.modules and "os" in sys.modules, case
