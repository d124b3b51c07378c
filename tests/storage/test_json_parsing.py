"""``storage._json.parse_json``: the limits it enforces are exact, and good JSON passes."""

from __future__ import annotations

import doctest
import json

import pytest

from storage import StoreError, _files, _json
from storage._json import MAX_DEPTH, parse_json
from tests.storage.test_json_garbage import MAX_DEPTH as DEPTH_THE_TESTS_USE


def _nest(depth: int) -> bytes:
    return b"[" * depth + b"1" + b"]" * depth


def test_depth_limit_is_exact() -> None:
    assert MAX_DEPTH == DEPTH_THE_TESTS_USE
    deepest = parse_json(_nest(MAX_DEPTH), "x.json")
    for _ in range(MAX_DEPTH - 1):
        deepest = deepest[0]
    assert deepest == [1]
    objects = b'{"a":' * MAX_DEPTH + b"1" + b"}" * MAX_DEPTH
    assert parse_json(objects, "x.json")["a"]["a"]["a"] is not None
    for deeper in (_nest(MAX_DEPTH + 1), b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * 65):
        with pytest.raises(StoreError, match=r"^x\.json: nested too deeply \(more than 64 levels"):
            parse_json(deeper, "x.json")


def test_good_documents_parse_as_json_does() -> None:
    value = {
        "text": ["caf\u00e9", "\U0001f600", "\\ud800 is six characters here", ""],
        "numbers": [-1, 0, 2.5e-3, 1.7976931348623157e308, 10**300],
        "nested": {"a": [{"b": None, "c": True}]},
    }
    for ensure_ascii in (True, False):  # "\U0001f600" as a surrogate-pair escape, or raw
        data = json.dumps(value, ensure_ascii=ensure_ascii).encode()
        assert parse_json(data, "x.json") == value
    assert parse_json(b"\xef\xbb\xbf[1]", "bom.json") == [1]  # a UTF-8 byte order mark


def test_errors_are_one_line_and_name_the_file() -> None:
    for data in (b"[\n1,\n", b"\n\n\xff", b"[NaN]", b'["\\udfff"]', b"1" * 5000):
        with pytest.raises(StoreError) as err:
            parse_json(data, "dir/f.json")
        assert str(err.value).startswith("dir/f.json") and "\n" not in str(err.value)
    with pytest.raises(StoreError, match=r"^f\.json, line 3: expected UTF-8"):
        parse_json(b"\n\n\xff", "f.json")


def test_module_examples_run() -> None:
    assert doctest.testmod(_json).failed == 0
    assert doctest.testmod(_files).failed == 0
