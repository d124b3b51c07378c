"""A build refuses a split it cannot fill, naming the split and the JSON, and leaves no
manifest: training needs ``train``, selection ``val`` and reporting ``test``, so a store
with an empty split used to be written (exit 0) only for training to fail later.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from storage import StoreWriter, build, open_store
from storage import inspect as inspect_cli
from storage._schema import BUILD_STATE, MANIFEST
from storage.karpathy import ingest, read_karpathy_json
from storage.synthetic import SceneProjectionExtractor
from tests.storage.cli_runs import (
    assert_refused,
    flickr_set,
    image_name,
    karpathy_args,
    run_main,
    write_jpeg,
)
from tests.storage.karpathy_files import coco_entry, flickr_entry, write_json


@pytest.mark.parametrize(
    ("splits", "empty", "sources"),
    [
        ((), "train", "'train' or 'restval'"),
        (("train", "test"), "val", "'val'"),
        (("train", "val"), "test", "'test'"),
        (("val", "test", "val"), "train", "'train' or 'restval'"),
        (("train", "restval", "train"), "val", "'val'"),
    ],
)
def test_a_json_without_a_split_is_refused_before_anything_is_written(
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    splits: tuple[str, ...],
    empty: str,
    sources: str,
) -> None:
    json_path, images = flickr_set(tmp_path, splits)
    out = tmp_path / "store"
    outcome = run_main(build.main, karpathy_args(json_path, images, out), capfd)
    assert_refused(
        outcome,
        f"{json_path}, field 'images': no image in split {empty!r} (none has 'split': {sources})",
    )
    assert not out.exists()  # so the same command works once the JSON is fixed


def test_an_images_list_that_is_empty_is_refused(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    json_path = tmp_path / "dataset_flickr8k.json"
    json_path.write_text(json.dumps({"dataset": "flickr8k", "images": []}))
    (tmp_path / "images").mkdir()
    outcome = run_main(build.main, karpathy_args(json_path, tmp_path / "images", "o"), capfd)
    assert_refused(outcome, str(json_path), "no image in split 'train'")


def test_restval_alone_fills_train(tmp_path: Path) -> None:
    from storage.karpathy import check_every_split

    entries = [coco_entry(0, "restval"), coco_entry(1, "val"), coco_entry(2, "test")]
    dataset = read_karpathy_json(write_json(tmp_path / "dataset_coco.json", "coco", entries))
    check_every_split(dataset)  # no error
    assert [len(dataset.images[s]) for s in ("train", "val", "test")] == [1, 1, 1]


def test_ingest_refuses_an_empty_split_before_writing(tmp_path: Path) -> None:
    entries = [flickr_entry(0, "train"), flickr_entry(1, "test")]
    dataset = read_karpathy_json(write_json(tmp_path / "d.json", "flickr8k", entries))
    writer = StoreWriter(tmp_path / "store", fingerprint={"t": 1}, feature_dim=8)
    with pytest.raises(ValueError, match="no image in split 'val'"):
        ingest(dataset, tmp_path, SceneProjectionExtractor(dim=8), writer)
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == [BUILD_STATE]


@pytest.mark.slow
def test_skip_unreadable_that_empties_a_split_is_refused_and_recoverable(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Every val image unreadable, both ways at once (missing and corrupt: the split is
    judged by what its shards hold, not by why an image was left out)."""
    splits = ("train", "val", "val", "val", "test")
    json_path, images = flickr_set(tmp_path, splits)
    (images / image_name(1)).unlink()  # missing
    for k in (2, 3):  # corrupt
        (images / image_name(k)).write_bytes(b"GIF89a broken")
    out = tmp_path / "store"
    argv = karpathy_args(json_path, images, out, "--skip-unreadable", "--shard-size", "2")
    # val's shards: images 1-2 (a missing and a corrupt one), then image 3 (corrupt)
    line = assert_refused(
        run_main(build.main, argv, capfd),
        f"{json_path}, field 'images': split 'val' would be empty: none of its 3 images",
    )
    assert str(images / image_name(1)) in line
    assert not (out / MANIFEST).exists()
    assert run_main(inspect_cli.main, [str(out)], capfd).status == 2  # not a complete store
    shards = sorted(p.name for p in (out / "images").iterdir())
    assert shards == ["train-00000.parquet"]  # train kept; val's empty shards removed

    for k in (1, 2, 3):  # the images are fixed: the same command reads them this time
        (images / image_name(k)).unlink(missing_ok=True)
        write_jpeg(images / image_name(k), shade=k * 40)
    assert run_main(build.main, argv, capfd).status == 0
    store = open_store(out)
    assert store.manifest.splits["val"].images == 3
    assert store.manifest.splits["val"].skipped_images == ()
    assert run_main(inspect_cli.main, [str(out)], capfd).status == 0


def test_skip_unreadable_with_no_readable_image_at_all_is_refused(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    json_path, images = flickr_set(tmp_path, ("train", "val", "test"))
    for k in range(3):
        (images / image_name(k)).unlink()
    out = tmp_path / "store"
    argv = karpathy_args(json_path, images, out, "--skip-unreadable")
    outcome = run_main(build.main, argv, capfd)
    assert_refused(outcome, f"{json_path}, field 'images': split 'train' would be empty")
    assert not (out / MANIFEST).exists()
    assert not list((out / "images").glob("*.parquet"))
