"""Reading Karpathy's split files exactly as docs/protocols.md section 4 says, and rejecting
bad ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from storage import StoreError
from storage.karpathy import read_karpathy_json, resolve_image_path
from tests.storage.karpathy_files import coco_entry, flickr_entry, write_json


def test_flickr_uses_raw_captions_and_keeps_json_order(tmp_path: Path) -> None:
    entries = [
        flickr_entry(0, "train"),
        flickr_entry(1, "val"),
        flickr_entry(2, "train"),
        flickr_entry(3, "test"),
    ]
    data = read_karpathy_json(write_json(tmp_path / "dataset_flickr8k.json", "flickr8k", entries))
    assert data.name == "flickr8k" and len(data.sha256) == 64
    assert [i.image_id for i in data.images["train"]] == ["1000_dog.jpg", "1002_dog.jpg"]
    assert data.images["train"][0].captions[1] == "A dog number 0 runs, take 1."
    assert [len(data.images[s]) for s in ("train", "val", "test")] == [2, 1, 1]


def test_coco_joins_tokens_with_a_full_stop_keeps_five_and_counts(tmp_path: Path) -> None:
    entries = [
        coco_entry(0, "train"),
        coco_entry(1, "restval", n_captions=7),
        coco_entry(2, "val", n_captions=6),
        coco_entry(3, "test"),
    ]
    data = read_karpathy_json(write_json(tmp_path / "dataset_coco.json", "coco", entries))
    train = data.images["train"]
    assert [i.image_id for i in train] == [
        "train2014/COCO_train2014_000000000000.jpg",
        "val2014/COCO_val2014_000000000001.jpg",
    ]  # restval joins
    assert train[0].captions[0] == "a cat number 0 sits on a mat, take 0 ."
    assert len(train[1].captions) == 5 and train[1].captions[-1].endswith("take 4 .")
    truncated = [i.image_id for split in data.images.values() for i in split if i.truncated]
    assert len(truncated) == 2


def test_dataset_name_from_file_name_or_flag(tmp_path: Path) -> None:
    path = tmp_path / "dataset_flickr30k.json"
    path.write_text(json.dumps({"images": [flickr_entry(0, "train")]}))
    assert read_karpathy_json(path).name == "flickr30k"
    assert read_karpathy_json(path, "flickr8k").name == "flickr8k"
    other = tmp_path / "mine.json"
    other.write_text(json.dumps({"images": []}))
    with pytest.raises(StoreError, match=r"mine.json, field 'dataset': unknown data set None"):
        read_karpathy_json(other)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda e: e.pop("split"), r"field 'images\[1\].split': missing \(expected str\)"),
        (lambda e: e.update(split="dev"), r"images\[1\].split': expected one of .*got 'dev'"),
        (lambda e: e.update(filename=7), r"images\[1\].filename': expected str, got int"),
        (lambda e: e["sentences"][2].pop("raw"), r"images\[1\].sentences\[2\].raw': missing"),
        (lambda e: e["sentences"].pop(), r"image '1001_dog.jpg' has 4 captions, expected 5"),
        (lambda e: e["sentences"].append(e["sentences"][0]), r"has 6 captions, expected 5"),
        (lambda e: e.update(filename="1000_dog.jpg"), r"'1000_dog.jpg' is listed twice"),
    ],
)
def test_bad_flickr_entries_name_the_field(tmp_path: Path, mutate, message: str) -> None:
    entries = [flickr_entry(0, "train"), flickr_entry(1, "train")]
    mutate(entries[1])
    path = write_json(tmp_path / "dataset_flickr8k.json", "flickr8k", entries)
    with pytest.raises(StoreError, match=message) as err:
        read_karpathy_json(path)
    assert "dataset_flickr8k.json" in str(err.value)


def test_bad_coco_entries_name_the_field(tmp_path: Path) -> None:
    entry = coco_entry(0, "train")
    del entry["filepath"]
    with pytest.raises(StoreError, match=r"images\[0\].filepath': missing"):
        read_karpathy_json(write_json(tmp_path / "dataset_coco.json", "coco", [entry]))
    entry = coco_entry(0, "train", n_captions=4)
    with pytest.raises(StoreError, match="has 4 captions, expected 5"):
        read_karpathy_json(write_json(tmp_path / "dataset_coco.json", "coco", [entry]))
    entry = coco_entry(0, "train")
    entry["sentences"][0]["tokens"] = "not a list"
    with pytest.raises(StoreError, match=r"sentences\[0\].tokens': expected list, got str"):
        read_karpathy_json(write_json(tmp_path / "dataset_coco.json", "coco", [entry]))


def test_unreadable_json(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot read the Karpathy JSON"):
        read_karpathy_json(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(StoreError, match=r"bad\.json: not valid JSON"):
        read_karpathy_json(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(StoreError, match="expected a top-level object with an 'images' list"):
        read_karpathy_json(tmp_path / "list.json")


def test_image_paths_cannot_escape_the_images_directory(tmp_path: Path) -> None:
    assert resolve_image_path(tmp_path, "a/b.jpg") == (tmp_path / "a" / "b.jpg").resolve()
    with pytest.raises(StoreError, match="escapes the images directory"):
        resolve_image_path(tmp_path, "../../etc/passwd")
