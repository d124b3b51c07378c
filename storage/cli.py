"""What every command line of this project shares: a parser whose errors are one line.

    parser = OneLineParser(prog="python -m trainables.encode", description="...")

A bad command line is ``error: MESSAGE (see PROG --help)`` on stderr and exit status 2,
never argparse's usage block; the message is kept on one line whatever the library said.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

from storage._errors import error_line, one_line

__all__ = ["OneLineParser", "error_line", "one_line"]


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad command line is one ``error:`` line (exit 2), not a usage block.
    Sub-commands made by ``add_subparsers`` are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {one_line(message)} (see {self.prog} --help)\n")
