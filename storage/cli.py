"""What every command line of this project shares: a parser whose errors are one line.

    parser = OneLineParser(prog="python -m trainables.encode", description="...")

A bad command line is ``error: MESSAGE (see PROG --help)`` on stderr and exit status 2,
never argparse's usage block; the message is kept on one line whatever the library said.
"""

from __future__ import annotations

import argparse
import textwrap
from typing import NoReturn

from storage._errors import error_line, one_line

__all__ = ["ExamplesHelpFormatter", "HelpFormatter", "OneLineParser", "error_line", "one_line"]


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad command line is one ``error:`` line (exit 2), not a usage block.
    Sub-commands made by ``add_subparsers`` are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {one_line(message)} (see {self.prog} --help)\n")


class HelpFormatter(argparse.HelpFormatter):
    """argparse's, but a line never breaks inside an option's name (``--semantic-every``),
    in an option's help or in the description."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        words = " ".join(text.split())
        return textwrap.fill(
            words, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
        )


class ExamplesHelpFormatter(HelpFormatter):
    """:class:`HelpFormatter`, keeping the description's and epilog's lines as written (a
    command's examples)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "".join(indent + line for line in text.splitlines(keepends=True))
