"""Parsing the JSON files the package reads, so that no content makes it crash.

Karpathy JSON files, manifests, ``build.json`` and ``suite.json`` come from users or
from disk, so their content is untrusted. Beyond what ``json.loads`` rejects, this
refuses, with a :class:`StoreError` naming the file:

- bytes that are not UTF-8 (a UTF-8 byte order mark is allowed);
- nesting deeper than :data:`MAX_DEPTH` (``json.loads`` would raise ``RecursionError``
  on deep input, and code that walks a parsed value could do the same further on);
- ``NaN``, ``Infinity`` and ``-Infinity`` (Python extensions, not JSON) and numbers
  beyond a float's range (``1e999`` would silently become infinity);
- integers of more than 4,300 digits (Python refuses to convert them);
- strings holding a lone UTF-16 surrogate (``"\\ud800"``): no UTF-8 writer (Parquet,
  a terminal) can encode them.

Example::

    >>> parse_json(b'{"a": [1, 2.5]}', "x.json")
    {'a': [1, 2.5]}
    >>> try:
    ...     parse_json(b"[" * 100_000 + b"]" * 100_000, "deep.json")
    ... except StoreError as err:
    ...     print(err)
    deep.json: nested too deeply (more than 64 levels of arrays and objects)
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

from storage._errors import StoreError, describe

__all__ = ["MAX_DEPTH", "parse_json", "utf8_text"]

# Every file this package reads nests at most 6 levels; 64 leaves room for extra
# fields while keeping any later walk of a value far from Python's recursion limit.
MAX_DEPTH = 64
# A \u escape in the surrogate range: only then can a decoded string hold a lone one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_CONTAINERS = frozenset({dict, list})


class _BadNumber(ValueError):
    """Raised from inside ``json.loads`` by the number hooks."""


def _no_constant(name: str) -> Any:
    raise _BadNumber(f"{name} is not a JSON number (expected a finite number)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _BadNumber(f"the number {text[:40]} is beyond a 64-bit float's range")
    return value


def utf8_text(data: bytes, where: str) -> str:
    """``data`` as UTF-8 text (a byte order mark dropped); else a StoreError naming
    ``where`` and the line of the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise StoreError(
            f"{describe(where, line=line)}: expected UTF-8 text ({err.reason})"
        ) from None


def parse_json(data: bytes, where: str) -> Any:
    """The value the JSON document ``data`` holds; ``where`` names it in errors."""
    text = utf8_text(data, where)
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except RecursionError:
        raise _too_deep(where) from None
    except json.JSONDecodeError as err:
        raise StoreError(
            f"{where}: not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})"
        ) from None
    except _BadNumber as err:
        raise StoreError(f"{where}: not valid JSON ({err})") from None
    except ValueError:  # an integer with more digits than Python converts
        limit = sys.get_int_max_str_digits()
        raise StoreError(
            f"{where}: not valid JSON (an integer has more than {limit} digits)"
        ) from None
    _check_tree(value, where, strings=_SURROGATE_ESCAPE.search(text) is not None)
    return value


def _too_deep(where: str) -> StoreError:
    return StoreError(
        f"{where}: nested too deeply (more than {MAX_DEPTH} levels of arrays and objects)"
    )


def _check_tree(value: Any, where: str, *, strings: bool) -> None:
    """Refuse nesting deeper than ``MAX_DEPTH`` and, with ``strings``, lone surrogates.

    Iterative, so it never recurses itself; the stack only ever holds arrays and
    objects, and a node without such children is passed over at C speed (the walk
    costs about a sixth of the parsing time on a COCO-sized Karpathy JSON).
    """
    if strings:
        _check_string(value, where)
    if type(value) not in _CONTAINERS:
        return
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep(where)
        children = node.values() if type(node) is dict else node
        if strings:
            for item in node.items() if type(node) is dict else node:
                for text in item if type(item) is tuple else (item,):
                    _check_string(text, where)
        if _CONTAINERS.isdisjoint(map(type, children)):
            continue
        stack.extend((child, depth + 1) for child in children if type(child) in _CONTAINERS)


def _check_string(value: Any, where: str) -> None:
    if type(value) is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise StoreError(
                f"{where}: the string {value[:60]!r} holds a lone UTF-16 surrogate "
                "(a \\ud800-\\udfff escape without its pair), which is not Unicode text"
            ) from None
