"""Every JSON file the storage package reads refuses garbage with one error naming it.

The readers: a Karpathy JSON (``storage.build karpathy --json``), a store's
``manifest.json`` (``storage.inspect``, and a build over a finished store), a build's
``build.json`` (a build resuming into its ``--out``) and a SentEval ``suite.json``
(``load_senteval``). Each is given every class of garbage below; a deep document used to
end in ``RecursionError``, an over-long integer in a bare ``ValueError``, ``NaN`` or
``1e999`` slipped through as numbers, and ``"\\ud800"`` reached Parquet and the terminal.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from storage import StoreError, build
from storage import inspect as inspect_cli
from storage._schema import BUILD_STATE, MANIFEST
from storage.senteval import load_senteval
from tests.storage.cli_runs import assert_refused, karpathy_args, run_main
from tests.storage.test_senteval import write_sick, write_sts_subtask

_DEEP = "nested too deeply"
MAX_DEPTH = 64  # levels of arrays and objects a file may nest (storage._json.MAX_DEPTH)


def _nest(depth: int, inner: str = "1") -> bytes:
    return ("[" * depth + inner + "]" * depth).encode()


# (bytes, what the error line must say besides the file's name)
GARBAGE: dict[str, tuple[bytes, str]] = {
    "deep arrays": (_nest(100_000), _DEEP),
    "deep objects": (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, _DEEP),
    "deep and unterminated": (b"[" * 100_000, _DEEP),
    "deep inside a field": (b'{"images": ' + _nest(300) + b', "x": 1}', _DEEP),
    "one level too deep": (_nest(MAX_DEPTH + 1), _DEEP),
    "not UTF-8": (b'{"images": ["caf\xe9"]}', "expected UTF-8 text"),
    "UTF-16": ('{"images": []}'.encode("utf-16"), "expected UTF-8 text"),
    "binary": (random.Random(0).randbytes(512), "expected UTF-8 text"),
    "empty": (b"", "not valid JSON"),
    "whitespace": (b" \n\t", "not valid JSON"),
    "truncated": (b'{"images": [{"filename": "a.jpg"', "not valid JSON"),
    "trailing garbage": (b'{"images": []} xyz', "not valid JSON"),
    "NaN": (b'{"images": [NaN]}', "NaN is not a JSON number"),
    "Infinity": (b'{"images": [], "x": Infinity}', "Infinity is not a JSON number"),
    "-Infinity": (b'{"images": [-Infinity]}', "-Infinity is not a JSON number"),
    "float beyond range": (b'{"images": [1e999]}', "beyond a 64-bit float's range"),
    "negative float beyond range": (b'{"images": [-2e308]}', "beyond a 64-bit float's range"),
    "integer of 5000 digits": (b'{"images": [' + b"7" * 5000 + b"]}", "more than 4300 digits"),
    "lone high surrogate": (b'{"images": ["\\ud800"]}', "lone UTF-16 surrogate"),
    "lone low surrogate key": (b'{"\\udc01": []}', "lone UTF-16 surrogate"),
}
# Wrong top-level types: each reader says what it expected instead.
WRONG_TOP: dict[str, bytes] = {
    "array": b"[]",
    "string": b'"images"',
    "number": b"42",
    "null": b"null",
    "true": b"true",
}
_GARBAGE_IDS = list(GARBAGE)


@pytest.mark.parametrize("name", _GARBAGE_IDS)
def test_karpathy_json_garbage_is_one_error_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], name: str
) -> None:
    data, says = GARBAGE[name]
    json_path = tmp_path / "dataset_flickr8k.json"
    json_path.write_bytes(data)
    (tmp_path / "images").mkdir()
    out = tmp_path / "store"
    outcome = run_main(build.main, karpathy_args(json_path, tmp_path / "images", out), capfd)
    assert_refused(outcome, str(json_path), says)
    assert not out.exists()  # refused before anything was written


@pytest.mark.parametrize("name", list(WRONG_TOP))
def test_karpathy_json_of_the_wrong_type(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], name: str
) -> None:
    json_path = tmp_path / "dataset_flickr8k.json"
    json_path.write_bytes(WRONG_TOP[name])
    (tmp_path / "images").mkdir()
    outcome = run_main(build.main, karpathy_args(json_path, tmp_path / "images", "o"), capfd)
    assert_refused(outcome, str(json_path), "expected a top-level object with an 'images' list")


@pytest.fixture(scope="module")
def finished_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("finished") / "store"
    assert build.main(["synthetic", "--images", "10", "--out", str(out)]) == 0
    return out


def _copy_with_manifest(store: Path, target: Path, data: bytes) -> Path:
    """A copy of ``store`` (its shards and world) whose manifest holds ``data``."""
    shutil.copytree(store, target)
    (target / MANIFEST).write_bytes(data)
    return target


@pytest.mark.parametrize("name", _GARBAGE_IDS)
def test_manifest_garbage_is_one_error_line_from_inspect_and_build(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], finished_store: Path, name: str
) -> None:
    data, says = GARBAGE[name]
    store = _copy_with_manifest(finished_store, tmp_path / "store", data)
    manifest = store / MANIFEST
    assert_refused(run_main(inspect_cli.main, [str(store)], capfd), str(manifest), says)
    # A build whose --out holds it reads it too (to see whether it is already complete).
    again = ["synthetic", "--images", "10", "--out", str(store)]
    assert_refused(run_main(build.main, again, capfd), str(manifest), says)
    assert manifest.read_bytes() == data  # left as it was


@pytest.mark.parametrize("name", list(WRONG_TOP))
def test_manifest_of_the_wrong_type(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], finished_store: Path, name: str
) -> None:
    store = _copy_with_manifest(finished_store, tmp_path / "store", WRONG_TOP[name])
    outcome = run_main(inspect_cli.main, [str(store)], capfd)
    assert_refused(outcome, f"{store / MANIFEST}: expected a JSON object, got")


@pytest.mark.parametrize("name", [*_GARBAGE_IDS, *WRONG_TOP])
def test_build_state_garbage_is_one_error_line_and_kept(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], name: str
) -> None:
    data, says = GARBAGE.get(name, (WRONG_TOP.get(name, b""), "expected a JSON object"))
    out = tmp_path / "store"
    out.mkdir()
    (out / BUILD_STATE).write_bytes(data)
    argv = ["synthetic", "--images", "10", "--out", str(out)]
    assert_refused(run_main(build.main, argv, capfd), str(out / BUILD_STATE), says)
    assert (out / BUILD_STATE).read_bytes() == data
    assert sorted(p.name for p in out.iterdir()) == [BUILD_STATE]


def _senteval_with_suite(root: Path, data: bytes) -> Path:
    write_sts_subtask(root, "STS12", "captions")
    write_sick(root)
    (root / "suite.json").write_bytes(data)
    return root


@pytest.mark.parametrize("name", _GARBAGE_IDS)
def test_suite_json_garbage_names_the_file(tmp_path: Path, name: str) -> None:
    data, says = GARBAGE[name]
    root = _senteval_with_suite(tmp_path / "downstream", data)
    with pytest.raises(StoreError) as err:
        load_senteval(root)
    message = str(err.value)
    assert str(root / "suite.json") in message and says in message
    assert "\n" not in message


@pytest.mark.parametrize("name", list(WRONG_TOP))
def test_suite_json_of_the_wrong_type(tmp_path: Path, name: str) -> None:
    root = _senteval_with_suite(tmp_path / "downstream", WRONG_TOP[name])
    with pytest.raises(StoreError, match=r"suite\.json: expected an object with exactly"):
        load_senteval(root)
