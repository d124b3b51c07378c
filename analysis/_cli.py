"""What the analysis CLIs share: their one error (``AnalysisError``, printed as one
``error:`` line, exit status 2) and how a run of one ends (``run_cli``), stdout that may
be closed early, and progress lines."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable
from typing import TextIO

from mlflow.exceptions import MlflowException

from storage.cli import error_line

__all__ = ["AnalysisError", "Progress", "print_out", "progress_printer", "run_cli", "silent"]


class AnalysisError(Exception):
    """Bad input (an unknown experiment or run, nothing to analyse); the CLIs print it
    as ``error: ...`` and exit with status 2."""


def run_cli(body: Callable[[], int], interrupted: str) -> int:
    """Run a CLI's ``body`` with warnings logged and MLflow's download bars off (an
    ensemble fetched for a test); an ``AnalysisError`` or a failing tracking store is one
    ``error:`` line and status 2, Ctrl-C the line ``interrupted`` and status 130."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return body()
    except AnalysisError as err:
        message = str(err)
    except MlflowException as err:  # the store failed while being read or written
        message = f"the MLflow tracking store failed ({error_line(err)})"
    except KeyboardInterrupt:
        print(interrupted, file=sys.stderr)
        return 130
    print(f"error: {' '.join(message.splitlines())}", file=sys.stderr)
    return 2


def print_out(text: str) -> int:
    """Print ``text`` on stdout; 0, or 141 (as for SIGPIPE) when its reader has gone
    (``... | head``), without a traceback."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        with contextlib.suppress(OSError, ValueError):  # so that exit flushes no more
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return 0


# told what a long computation is doing, one short line at a time
Progress = Callable[[str], None]


def silent(_: str) -> None:
    """A :data:`Progress` that says nothing."""


def progress_printer(prog: str, quiet: bool, stream: TextIO | None = None) -> Progress:
    """What a long CLI is doing, one short line per step (``PROG: what``) on ``stream``
    (default stderr) when it is a terminal, so that minutes of work are not minutes of
    silence; nothing when ``quiet`` or when stderr goes to a file or a pipe (a script
    reads only the result and, on bad input, the one ``error:`` line)."""
    shown = not quiet and (stream or sys.stderr).isatty()

    def say(line: str) -> None:
        if shown:
            print(f"{prog}: {line}", file=stream or sys.stderr, flush=True)

    return say
