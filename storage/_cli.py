"""Shared plumbing for the storage command-line tools."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from storage._errors import StoreError


def run_cli(body: Callable[[], int]) -> int:
    """Run a CLI body: log to stderr, and turn a :class:`StoreError` into one clear
    ``error:`` line and exit status 2 instead of a traceback."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        return body()
    except StoreError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; run the same command again to resume", file=sys.stderr)
        return 130
