"""A manifest whose counts disagree with its shards (a split's image or caption count, a
shard's rows) is refused on every read path, naming the field, before any array is sized
from it: ``read_split``, ``read_features``, ``read_captions``, ``storage.inspect`` and
``trainables.train``, each one ``error:`` line with exit 2 for the CLIs."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from storage import StoreError, build, open_store, read_split
from storage import inspect as inspect_cli
from storage._schema import MANIFEST
from tests.storage.cli_runs import run_main
from trainables.train import main as train_main

SPLITS = ("train", "val", "test")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("counts") / "store"
    assert build.main(["synthetic", "--images", "40", "--shard-size", "8", "--out", str(out)]) == 0
    return out


def _images(delta: int) -> Callable[[dict[str, Any]], str]:
    def change(split: dict[str, Any]) -> str:
        split["images"] += delta
        return "images"

    return change


def _captions(delta: int) -> Callable[[dict[str, Any]], str]:
    def change(split: dict[str, Any]) -> str:
        split["captions"] += delta
        return "captions"

    return change


def _both(delta: int) -> Callable[[dict[str, Any]], str]:
    """Images and captions agree with each other, not with the shards."""

    def change(split: dict[str, Any]) -> str:
        split["images"] += delta
        split["captions"] += 5 * delta
        return "images"

    return change


def _shard_rows(delta: int) -> Callable[[dict[str, Any]], str]:
    """The first shards' rows changed with the split's totals: only the files disagree."""

    def change(split: dict[str, Any]) -> str:
        split["image_shards"][0]["rows"] += delta
        split["caption_shards"][0]["rows"] += 5 * delta
        split["images"] += delta
        split["captions"] += 5 * delta
        return "rows"

    return change


CHANGES = {
    "images +2": _images(2),
    "images -2": _images(-2),
    "captions +1": _captions(1),
    "captions -5": _captions(-5),
    "images and captions +2": _both(2),
    "images and captions -1": _both(-1),
    "shard rows +1": _shard_rows(1),
    "shard rows -1": _shard_rows(-1),
}


def _lying_copy(store: Path, out: Path, split: str, change: Callable[..., str]) -> str:
    shutil.copytree(store, out)
    manifest = json.loads((out / MANIFEST).read_text())
    if not manifest["splits"][split]["image_shards"]:
        pytest.skip(f"the synthetic store's {split} split is empty")
    field = change(manifest["splits"][split])
    (out / MANIFEST).write_text(json.dumps(manifest))
    return field


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("name", list(CHANGES))
def test_every_reader_refuses_counts_that_disagree(
    tmp_path: Path, store: Path, split: str, name: str
) -> None:
    lying = tmp_path / "store"
    field = _lying_copy(store, lying, split, CHANGES[name])
    readers = (
        lambda: read_split(str(lying), split),
        lambda: read_split(str(lying), split, verify=True),
        lambda: open_store(str(lying)).read_features(split),
        lambda: open_store(str(lying)).read_captions(split),
    )
    for read in readers:
        with pytest.raises(StoreError) as caught:
            read()
        message = str(caught.value)
        if field == "rows":  # the manifest is consistent; the shard file is not
            assert f"{split}-00000.parquet" in message and "the manifest says" in message
        else:
            assert f"splits.{split}.{field}" in message and "rebuild" in message, message


@pytest.mark.parametrize("split", SPLITS)
def test_inspect_and_train_name_the_count(
    tmp_path: Path, store: Path, split: str, capfd: pytest.CaptureFixture[str]
) -> None:
    lying = tmp_path / "store"
    _lying_copy(store, lying, split, _images(-2))
    before = sorted(p.name for p in lying.rglob("*"))
    for main, argv in (
        (inspect_cli.main, [str(lying)]),
        (train_main, ["--data", str(lying), "--epochs", "1", "--device", "cpu"]),
    ):
        outcome = run_main(main, argv, capfd)
        assert outcome.status == 2, outcome
        assert len(outcome.error_lines) == 1 and outcome.err.strip() == outcome.error_lines[0]
        assert f"splits.{split}.images" in outcome.err and "Traceback" not in outcome.err
    assert sorted(p.name for p in lying.rglob("*")) == before  # nothing written
