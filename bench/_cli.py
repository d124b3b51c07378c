"""What every benchmark's command line shares: the parser, one-line errors, list flags.

    @entry
    def main(argv: Sequence[str] | None = None) -> int:
        args = parser(__doc__).parse_args(argv)
        ...

    if __name__ == "__main__":
        raise SystemExit(main())

Imports neither torch, Ray nor MLflow."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from storage.cli import ExamplesHelpFormatter, OneLineParser


class Main(Protocol):
    """A benchmark's entry: its command line (None: ``sys.argv[1:]``) -> its exit status."""

    def __call__(self, argv: Sequence[str] | None = None) -> int: ...


T = TypeVar("T")


class BadInput(Exception):
    """A flag or file the benchmark cannot use; its message is one ``error:`` line naming
    it and what was expected. :func:`entry` prints it and returns 2, without a traceback."""


class _Help(ExamplesHelpFormatter):
    """The description as written, and every option's default after its help (unless the
    help names it, or there is none to show)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        # by identity: a default of 0 is shown (0 == False)
        hidden = action.default is None or action.default is False
        shown = not hidden and action.default != argparse.SUPPRESS and action.option_strings
        if not shown or "default" in text or text == argparse.SUPPRESS:
            return action.help
        return f"{text} (default: %(default)s)".lstrip()


def parser(doc: str | None) -> OneLineParser:
    """A benchmark's parser: its docstring's first line as the description, a bad command
    line as one ``error:`` line (exit 2), defaults shown in ``--help``."""
    description = (doc or "").strip().splitlines()[0] if doc else None
    return OneLineParser(description=description, formatter_class=_Help)


def entry(main: Main) -> Main:
    """``main`` as a command's entry: its exit status returned, bad input (``BadInput``)
    printed as its one line with status 2, and argparse's exits (``--help``, a bad flag)
    returned as their status rather than raised."""

    @functools.wraps(main)
    def wrapped(argv: Sequence[str] | None = None) -> int:
        try:
            return main(argv)
        except BadInput as e:
            print(e, file=sys.stderr)
            return 2
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                return e.code or 0
            raise

    return wrapped


def numbers(kind: Callable[[str], T], what: str) -> Callable[[str], list[T]]:
    """An argparse ``type``: comma-separated ``kind`` values ("0.1,0.2"), in the given
    order; anything else is the flag's one error line."""

    def parse(text: str) -> list[T]:
        try:
            return [kind(x) for x in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"got {text!r}, expected comma-separated {what}"
            ) from None

    parse.__name__ = what  # argparse names the type in its messages
    return parse


floats = numbers(float, "numbers")
ints = numbers(int, "integers")
