"""Shared plumbing for the storage command-line tools: a bad command line, a bad file and
a failing filesystem each end in exactly one ``error:`` line on stderr and exit status 2."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from storage._errors import StoreError, one_line, os_reason
from storage.cli import ExamplesHelpFormatter, OneLineParser

__all__ = ["HelpFormatter", "Parser", "run_cli"]

logger = logging.getLogger(__name__)


Parser = OneLineParser  # the storage commands' name for it
HelpFormatter = ExamplesHelpFormatter  # their help keeps its examples' lines


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
