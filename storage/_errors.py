"""Errors raised at the storage boundary: data files, stores and CLI input."""

from __future__ import annotations


class StoreError(ValueError):
    """A data file or store is missing, malformed or inconsistent.

    The message always names the file (and, where it applies, the field or line)
    and says what was expected, so a user can fix the input without a traceback.
    """


def describe(path: object, field: str | None = None, line: int | None = None) -> str:
    """Format the location part of an error message: ``file[, line N][, field 'x']``."""
    where = str(path)
    if line is not None:
        where += f", line {line}"
    if field is not None:
        where += f", field {field!r}"
    return where
