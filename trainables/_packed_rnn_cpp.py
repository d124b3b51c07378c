"""The per-step loops of ``trainables._packed_rnn`` in C++ (``_packed_rnn.cpp``), built
with ``torch.utils.cpp_extension`` (the machine's C++ compiler) into a folder keyed by
what it is compiled from (``trainables._compiled``).

On the CPU the Python loop issues about a dozen ATen calls per step and direction, and
at n=256 issuing them took more time than the arithmetic (BENCHMARKS.md, "Training at
the CPU's limit"). The C++ loop makes per step one matrix product (the same ATen call) and one
pass over the gates, compiled with the machine's vector instructions.

:func:`prebuild` builds it (once per key; a search's driver calls it before any trial
starts, the train CLI before it trains, ``python -m trainables.cpp_loop`` on demand).
:func:`extension` is the built module, or None: it never builds, so a trial, a model
load or a served model never waits on a compiler; where it is not built they run the
Python loop (the same equations, checked against each other in
tests/trainables/test_packed_rnn.py), with one warning. A run whose config says
``recurrence`` "python" (:func:`use`) runs the Python loop without looking.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from storage.cli import error_line
from trainables import _compiled

__all__ = ["SOURCE", "build_seconds", "extension", "prebuild", "use"]

SOURCE = Path(__file__).with_name("_packed_rnn.cpp")
# -ffast-math: glibc's vector exp and tanh (libmvec) in the gate loops; compile flags
# only (never at link time, where gcc 12 would set flush-to-zero for the whole process)
FLAGS = ["-O3", "-march=native", "-ffast-math", "-fopenmp-simd"]
WHAT = "the C++ recurrence (trainables/_packed_rnn.cpp)"

_built: list[ModuleType | None] = []
# one thread looks it up (or builds it); the others wait for its answer: a bidirectional
# layer runs its two directions on two threads, and both ask at the first step
_looking = threading.Lock()
_recurrence = ["compiled"]  # this process's ``RunConfig.recurrence`` (``use``)


def _extension() -> _compiled.Extension:
    return _compiled.Extension("grounded_packed_rnn", SOURCE, tuple(FLAGS))


def use(recurrence: str) -> None:
    """Run this process's recurrences as a run's config says (``RunConfig.recurrence``):
    "compiled" (the C++ loop where it is built) or "python" (never looked up). Each
    trainer and model load calls it with its config's, as it sets torch's threads."""
    _recurrence[0] = recurrence


def extension() -> ModuleType | None:
    """The compiled loops (looked up once per process, by one thread: the others wait for
    its answer), or None: recurrence "python" (``use``), or not built for this machine
    (warned once). Never builds or waits on another process."""
    if _recurrence[0] == "python":
        return None
    if _built:
        return _built[0]
    with _looking:
        if not _built:
            _built.append(_look_up())
    return _built[0]


def _look_up() -> ModuleType | None:
    module = None
    try:
        module = _compiled.load(_extension())
    except Exception as exc:  # a damaged build: the Python loop still works
        why = f"cannot be loaded ({error_line(exc, last=True)})"
    else:
        where = _compiled.folder(_extension())
        why = f"is not built for this machine and environment ({where})"
    if module is None:
        warnings.warn(
            f"{WHAT} {why}; training on the CPU uses the Python loop (slower). "
            "`python -m trainables.cpp_loop` builds it (a search builds it before its "
            "trials); the config's recurrence python (--recurrence python) silences this",
            RuntimeWarning,
            stacklevel=3,
        )
    return module


def build_seconds() -> float | None:
    """How long the latest build of the loops in this cache took (None: never built)."""
    return _compiled.last_build_seconds(_extension())


def _silent(line: str) -> None:
    """The default ``write``: a library call prints nothing."""


def prebuild(write: Callable[[str], None] = _silent) -> ModuleType | None:
    """Build the loops for this machine unless they are built (``write`` receives a line
    when it builds or waits for another process building them, and how long it took);
    None where they cannot be built (one line says why: the Python loop runs)."""
    try:
        module: ModuleType | None = _compiled.build(_extension(), write, WHAT)
    except Exception as exc:  # no compiler, no headers: the Python loop still works
        write(
            f"{WHAT} could not be built ({error_line(exc, last=True)}); training on the CPU "
            "uses the Python loop (slower; --recurrence python skips the build)"
        )
        module = None
    with _looking:
        _built[:] = [module]
    return module
