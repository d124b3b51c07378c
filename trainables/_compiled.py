"""C++ built with ``torch.utils.cpp_extension``, keyed by what it is compiled from.

A build lives in ``ROOT/<prefix>_<key>/`` (``ROOT``: ``TORCH_EXTENSIONS_DIR``, else torch's
``~/.cache/torch_extensions``), where the key is a digest of everything the binary depends
on (:func:`key_parts`): the source's bytes, the flags, torch's version and build, the Python
ABI, the compiler and its version, the CPU (``-march=native``). Two clones or two virtual
environments with the same of all these share one build; any difference is another folder,
so they never rebuild over each other (torch's own cache is named by the extension's name
alone, and its ninja rebuilds whenever the source's path differs: two clones took turns).

:func:`load` never builds and never waits: it imports the published module or returns None.
A build is published only when whole: the module is moved into the folder and then
``key.json`` names it (both atomic renames), so a reader sees all of it or nothing: a
process never needs a lock to load one, whoever else shares the folder.
Within a process, loading is one thread at a time (``_LOADING``): an extension module is
created, then run (PEP 489); a pybind11 module run a second time finds its first, finished
copy and leaves the second empty, so two threads importing one at once could each make
one, and the later got a module without its functions.
:func:`build` is for a process that may take the time (a search's driver, the train CLI,
``python -m trainables.cpp_loop``): it compiles in a folder of its own and holds a lock on
the key while it does, so a second builder of the same key (the only one that could want
the same files) waits for the first's result instead of compiling it again, and says so.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import platform
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

from filelock import FileLock, Timeout

from storage import write_text_atomic

__all__ = ["Extension", "build", "folder", "key_parts", "last_build_seconds", "load", "root"]

MANIFEST = "key.json"  # written last: the build is complete and names its module
LOG = "builds.log"  # a line per build: who built it, where, how long it took
_LOCK = ".lock"
_BUILDER = ".builder"  # who holds the lock (host, pid, since), for a waiter to say
# one thread of a process at a time imports a build (see the module docstring)
_LOADING = threading.RLock()


class Extension(NamedTuple):
    """What is compiled: the folder names' prefix (a Python identifier), the C++ source
    and the compiler flags."""

    prefix: str
    source: Path
    flags: tuple[str, ...]


def root() -> Path:
    """Where builds live: ``TORCH_EXTENSIONS_DIR``, else torch's default cache."""
    given = os.environ.get("TORCH_EXTENSIONS_DIR")
    if given:
        return Path(given)
    return Path(_cpp_extension().get_default_build_root())


def _cpp_extension() -> ModuleType:
    """``torch.utils.cpp_extension``, imported without its "No CUDA runtime is found"
    warning (logged on import on every machine without a GPU: not news to a CPU run)."""
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    from torch.utils import cpp_extension

    return cpp_extension


def _compiler() -> str:
    """The C++ compiler torch runs (``CXX``, else ``c++``), resolved, and its version."""
    name = os.environ.get("CXX", "c++")
    path = shutil.which(name) or name
    try:
        done = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
        version = (done.stdout.strip().splitlines() or ["?"])[0]
    except (OSError, subprocess.SubprocessError) as err:
        version = f"unusable ({type(err).__name__})"
    return f"{os.path.realpath(path) if os.path.exists(path) else path}: {version}"


def _cpu() -> str:
    """The CPU (``-march=native`` code must not run on another kind sharing the folder)."""
    cpu = f"{platform.machine()} {platform.processor()}"
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return cpu
    for field in ("model name", "flags", "Features"):  # x86, and ARM's
        found = next((line for line in lines if line.startswith(field)), None)
        if found is not None:
            cpu += " | " + " ".join(found.split())
    return cpu


def key_parts(extension: Extension) -> dict[str, str]:
    """Everything the compiled module depends on, by name."""
    import torch

    return {
        "source": hashlib.sha256(extension.source.read_bytes()).hexdigest(),
        "flags": " ".join(extension.flags),
        "torch": f"{torch.__version__} {torch.version.git_version}",
        "python": f"{sys.implementation.cache_tag} {sysconfig.get_config_var('EXT_SUFFIX')}",
        "compiler": _compiler(),
        "cpu": _cpu(),
    }


_folders: dict[tuple[Extension, str], Path] = {}  # computing a key runs the compiler


def folder(extension: Extension) -> Path:
    """The folder of ``extension``'s build for this machine and environment."""
    here = str(root())
    found = _folders.get((extension, here))
    if found is None:
        text = json.dumps(key_parts(extension), sort_keys=True)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        found = _folders[(extension, here)] = Path(here) / f"{extension.prefix}_{digest}"
    return found


def load(extension: Extension) -> ModuleType | None:
    """The built module, or None where it is not built for this key: never compiles,
    never waits on a lock another process holds. A manifest whose module is gone or
    cannot be loaded (a cache cleaner took the file, a disk damaged it) is no build: the
    next builder builds again. Thread-safe: a module is imported once per process, by
    one thread, and every caller gets that one (``_LOADING``)."""
    where = folder(extension)
    try:
        manifest = json.loads((where / MANIFEST).read_text())
        name, file = manifest["module"], manifest["file"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    # what a build writes: the folder's own module, a file in the folder (anything else
    # is no build: the shared folder's manifest never names code elsewhere)
    if name != where.name or not isinstance(file, str) or Path(file).name != file:
        return None
    if not file.startswith(f"{name}.") or file.startswith("."):
        return None
    file = where / file
    with _LOADING:
        if name in sys.modules:  # loaded already (a module is initialised once per process)
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, file)
        if spec is None or spec.loader is None:
            return None
        try:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        except ImportError:  # the file is missing or not a loadable module
            return None
        sys.modules[name] = module
        return module


Write = Callable[[str], None]


def build(extension: Extension, write: Write, what: str) -> ModuleType:
    """The module, built here unless it is built already (then loaded), or unless another
    process is building it (then waited for, saying so). ``what`` names it in the lines
    ``write`` receives. Raises what the compiler raised when it cannot be built."""
    found = load(extension)
    if found is not None:
        return found
    where = folder(extension)
    where.mkdir(parents=True, exist_ok=True)
    lock = FileLock(where / _LOCK)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        holder = _read(where / _BUILDER) or "another process"
        write(f"waiting for {holder}, which is building {what} in {where}")
        started = time.monotonic()
        lock.acquire()
        write(f"  waited {time.monotonic() - started:.0f} s")
    try:
        found = load(extension)  # the process waited for built it
        if found is not None:
            return found
        return _compile(extension, where, write, what)
    finally:
        (where / _BUILDER).unlink(missing_ok=True)
        lock.release()


def last_build_seconds(extension: Extension) -> float | None:
    """How long the latest build of ``extension`` in ``root()`` took (any key: another
    source or torch, on this machine or one sharing the cache), as its manifest recorded;
    None where none was built."""
    latest: tuple[str, float] | None = None
    for manifest in root().glob(f"{extension.prefix}_*/{MANIFEST}"):
        try:
            found = json.loads(manifest.read_text())
            built = (str(found["built_at"]), float(found["seconds"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        latest = max(latest or built, built)
    return None if latest is None else latest[1]


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _compile(extension: Extension, where: Path, write: Write, what: str) -> ModuleType:
    """Compile in a folder of this process's own, then publish: the module moved in, then
    the manifest. The caller holds the key's lock, so every other build folder in
    ``where`` was left by a builder that died: removed."""
    for left in where.glob("build-*"):
        shutil.rmtree(left, ignore_errors=True)
    host, pid = socket.gethostname(), os.getpid()
    since = time.strftime("%Y-%m-%d %H:%M:%S")
    write_text_atomic(where / _BUILDER, f"pid {pid} on {host} (since {since})\n")
    earlier = last_build_seconds(extension)
    took = (
        "not built on this machine before"
        if earlier is None
        else f"about {earlier:.0f} s, as the latest build here took"
    )
    write(
        f"building {what} for this machine into {where} (once per source, torch, Python, "
        f"compiler and CPU; {took})"
    )
    started = time.monotonic()
    work = where / f"build-{host}-{pid}"
    work.mkdir()
    cpp_extension = _cpp_extension()

    with warnings.catch_warnings(), _LOADING:  # it imports what it built
        warnings.simplefilter("ignore")  # "No CUDA runtime is found" and the like
        module = cpp_extension.load(
            name=where.name,
            sources=[str(extension.source)],
            extra_cflags=list(extension.flags),
            build_directory=str(work),
            verbose=False,
        )
    built = Path(str(module.__file__))
    os.replace(built, where / built.name)
    module.__file__ = str(where / built.name)  # where it now is
    with _LOADING:  # this process's one copy, before a reader finds the manifest
        sys.modules[module.__name__] = module
    seconds = time.monotonic() - started
    manifest = {
        "module": module.__name__,
        "file": built.name,
        "built_by": f"pid {pid} on {host}",
        "built_at": since,
        "seconds": round(seconds, 1),
        "key": key_parts(extension),
    }
    write_text_atomic(where / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    with (where / LOG).open("a") as log:
        log.write(f"{since} pid {pid} on {host}: built in {seconds:.1f} s\n")
    shutil.rmtree(work, ignore_errors=True)
    write(f"  built in {seconds:.0f} s")
    return module
