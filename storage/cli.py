"""What every command line of this project shares: a parser whose errors are one line,
and (for the storage commands) how a run ends.

    parser = OneLineParser(prog="python -m trainables.encode", description="...")

A bad command line is ``error: MESSAGE (see PROG --help)`` on stderr and exit status 2,
never argparse's usage block; the message is kept on one line whatever the library said.
"""

from __future__ import annotations

import argparse
import logging
import sys
import textwrap
from collections.abc import Callable
from typing import NoReturn

from storage._errors import StoreError, error_line, one_line, os_reason

__all__ = [
    "ExamplesHelpFormatter",
    "HelpFormatter",
    "OneLineParser",
    "error_line",
    "one_line",
    "run_cli",
]

logger = logging.getLogger(__name__)


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


def run_cli(body: Callable[[], int]) -> int:
    """Run a CLI body: log to stderr, and turn a :class:`StoreError` into one clear
    ``error:`` line and exit status 2 instead of a traceback.

    ``OSError`` and ``MemoryError`` are caught as well, as a last resort: every file this
    package reads or writes is named by a ``StoreError`` where it is touched, so one of
    these reaching here means a place that does not yet, and a traceback would still
    tell the user less than the error's own message (the traceback is logged at debug).
    """
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        return body()
    except StoreError as err:
        return _fail(one_line(err))
    except OSError as err:
        logger.debug("unexpected filesystem error", exc_info=True)
        where = f"{err.filename}: " if err.filename else ""
        return _fail(f"{where}{os_reason(err)}")
    except MemoryError:
        logger.debug("out of memory", exc_info=True)
        return _fail("out of memory")
    except KeyboardInterrupt:
        print("interrupted; run the same command again to resume", file=sys.stderr)
        return 130


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2
