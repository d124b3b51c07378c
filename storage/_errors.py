"""Errors raised at the storage boundary: data files, stores and CLI input."""

from __future__ import annotations


class StoreError(ValueError):
    """A data file or store is missing, malformed or inconsistent.

    The message always names the file (and, where it applies, the field or line)
    and says what was expected, so a user can fix the input without a traceback.
    """


class MissingFileError(StoreError):
    """A file that should be there is not (callers may word this in their own terms)."""


def describe(path: object, field: str | None = None, line: int | None = None) -> str:
    """Format the location part of an error message: ``file[, line N][, field 'x']``."""
    where = str(path)
    if line is not None:
        where += f", line {line}"
    if field is not None:
        where += f", field {field!r}"
    return where


def one_line(text: object) -> str:
    """``text`` on a single line: messages from libraries (pyarrow, torch) may span
    several, and a CLI reports an error as exactly one ``error:`` line."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def error_line(err: BaseException, limit: int = 300, *, last: bool = False) -> str:
    """An exception as one short line: its type and the first line of its message (the
    last with ``last``: a Ray or compiler error ends with its cause), at most ``limit``
    characters of it, or its type alone when it says nothing. The one formatter of an
    exception for a message."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    return f"{type(err).__name__}: {lines[-1 if last else 0][:limit]}"


def os_reason(err: BaseException) -> str:
    """The reason an ``OSError`` (or a library's error) gives, on one line and without
    the path, which the caller names."""
    return one_line(getattr(err, "strerror", None) or err)
