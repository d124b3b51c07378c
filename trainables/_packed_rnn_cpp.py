"""The per-step loops of ``trainables._packed_rnn`` in C++ (``_packed_rnn.cpp``), built
on first use with ``torch.utils.cpp_extension`` (the machine's C++ compiler; cached
under ``TORCH_EXTENSIONS_DIR``, default ``~/.cache/torch_extensions``).

On the CPU the Python loop issues about a dozen ATen calls per step and direction, and
at n=256 issuing them took more time than the arithmetic (BENCHMARKS.md, "Training at
the CPU's limit"). The C++ loop makes per step one matrix product (the same ATen call) and one
pass over the gates, compiled with the machine's vector instructions.

:func:`extension` is the built module, or None when it cannot be built (no compiler):
then the Python loop runs, with one warning. ``GROUNDED_PACKED_RNN=python`` asks for the
Python loop without trying.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import warnings
from pathlib import Path
from types import ModuleType

from storage.cli import error_line

__all__ = ["ENV", "SOURCE", "extension"]

ENV = "GROUNDED_PACKED_RNN"  # "python": never build or use the C++ loop
SOURCE = Path(__file__).with_name("_packed_rnn.cpp")
# -ffast-math: glibc's vector exp and tanh (libmvec) in the gate loops; compile flags
# only (never at link time, where gcc 12 would set flush-to-zero for the whole process)
FLAGS = ["-O3", "-march=native", "-ffast-math", "-fopenmp-simd"]

_built: list[ModuleType | None] = []


def _name() -> str:
    """The build's name: a digest of the source, the flags and this CPU (``-march=native``
    code must not be loaded by another kind of CPU sharing the cache)."""
    cpu = platform.machine() + platform.processor()
    try:
        flags = [line for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith(("flags", "model name"))][:2]  # fmt: skip
        cpu += "".join(flags)
    except OSError:
        pass
    digest = hashlib.sha256((SOURCE.read_text() + " ".join(FLAGS) + cpu).encode()).hexdigest()
    return f"grounded_packed_rnn_{digest[:12]}"


def extension() -> ModuleType | None:
    """The compiled loops (built once per process, from the cache after the first build),
    or None: ``GROUNDED_PACKED_RNN=python``, or the build failed (warned once)."""
    if _built:
        return _built[0]
    module = None
    if os.environ.get(ENV, "").lower() != "python":
        try:
            # importing it logs "No CUDA runtime is found" on a CPU-only machine: not news
            logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
            from torch.utils import cpp_extension

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "No CUDA runtime is found" and the like
                module = cpp_extension.load(
                    name=_name(), sources=[str(SOURCE)], extra_cflags=FLAGS, verbose=False
                )
        except Exception as exc:  # no compiler, no headers: the Python loop still works
            warnings.warn(
                f"trainables/_packed_rnn.cpp could not be built ({error_line(exc, last=True)}); "
                f"training on the CPU uses the Python loop (slower; {ENV}=python silences this)",
                RuntimeWarning,
                stacklevel=2,
            )
    _built.append(module)
    return module
