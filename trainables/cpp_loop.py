"""``python -m trainables.cpp_loop``: build the C++ recurrence for this machine now.

    python -m trainables.cpp_loop          # build it (or say where it is built)

A search's driver builds it before any trial starts and the train CLI before it trains;
a trial or a model load never builds it (where it is missing they run the Python loop).
Run this on a node of a cluster whose CPU, compiler, torch or Python differs from the
driver's, or on a fresh machine before serving a model. Builds are keyed by what they
are compiled from, under ``TORCH_EXTENSIONS_DIR`` (default ``~/.cache/torch_extensions``):
clones, virtual environments and nodes sharing a home folder each build at most once per
key. Exit status 0 when it is built, 1 when it cannot be (the line says why).
"""

from __future__ import annotations

import sys

from storage.cli import HelpFormatter, OneLineParser
from trainables._packed_rnn_cpp import WHAT, prebuild

__all__ = ["main"]


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="python -m trainables.cpp_loop",
        description=f"Build {WHAT} for this machine, once per key, and print its file.",
        formatter_class=HelpFormatter,
    )
    parser.parse_args(argv)
    module = prebuild(_say)
    if module is None:
        return 1
    print(module.__file__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
