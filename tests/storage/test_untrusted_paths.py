"""Paths read from data files cannot leave their directory.

Each test writes a real, valid file (a store's manifest.json, a Karpathy JSON, a
SentEval suite.json), tampers with one path in it, and checks that parsing refuses it
with a StoreError naming the file, the field and what was expected. Where it matters,
the escape target really exists, so without the check the read would succeed.
"""

from __future__ import annotations

import doctest
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from storage import StoreError, StoreWriter, _paths, build, open_store
from storage import inspect as inspect_cli
from storage._schema import MANIFEST
from storage.karpathy import read_karpathy_json, resolve_image_path
from storage.senteval import load_senteval, load_suite
from tests.storage.karpathy_files import coco_entry, flickr_entry, write_images, write_json
from tests.storage.test_senteval import write_sick, write_sts_subtask

_BACKSLASH = "contains a backslash (separate directories with '/')"
_EMPTY_SEGMENT = "has an empty segment ('//' or a trailing '/')"

# --- the store's manifest ------------------------------------------------------------


def _write_store(out: Path, extras: dict[str, Any] | None = None) -> Path:
    """A complete two-split store with one shard per split."""
    rng = np.random.default_rng(0)
    writer = StoreWriter(out, fingerprint={"source": "test"}, feature_dim=4)
    records = {}
    for split, n in (("train", 3), ("val", 2)):
        ids = [f"{split}-{i}.jpg" for i in range(n)]
        captions = [[f"{split} {i} caption {k}" for k in range(5)] for i in range(n)]
        features = rng.standard_normal((n, 4)).astype(np.float32)
        records[split] = [writer.write_shard(split, 0, ids, features, captions)]
    writer.finish(dataset="test", feature_extractor={}, splits=records, extras=extras)
    return out


def _tamper(store: Path, change: Callable[[dict[str, Any]], None]) -> None:
    manifest = json.loads((store / MANIFEST).read_text())
    change(manifest)
    (store / MANIFEST).write_text(json.dumps(manifest, indent=2))


def _set_shard_path(value: str, key: str = "image_shards") -> Callable[[dict[str, Any]], None]:
    def change(manifest: dict[str, Any]) -> None:
        manifest["splits"]["train"][key][0]["path"] = value

    return change


_IMAGE_SHARD = r"manifest\.json, field 'splits\.train\.image_shards\[0\]\.path': "
_EXPECTED_SHARD = _IMAGE_SHARD + r"expected 'images/train-00000\.parquet' .*"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("../../etc/passwd", _EXPECTED_SHARD + r"got '\.\./\.\./etc/passwd', which has a '\.\.'"),
        ("/etc/passwd", _EXPECTED_SHARD + "got '/etc/passwd', which is an absolute path"),
        ("C:/x/train-00000.parquet", _EXPECTED_SHARD + "which is an absolute path"),
        ("images\\train-00000.parquet", _EXPECTED_SHARD + "which contains a backslash"),
        ("images//train-00000.parquet", _EXPECTED_SHARD + "which has an empty segment"),
        ("./images/train-00000.parquet", _EXPECTED_SHARD + "which has a '\\.' segment"),
        ("images/train-00000.parquet\x00", _EXPECTED_SHARD + "which contains a NUL"),
        ("", _EXPECTED_SHARD + "got '', which is empty"),
        # Inside the store but not where the writer puts shard 0 of train: refused too.
        ("images/val-00000.parquet", _EXPECTED_SHARD + r"got 'images/val-00000\.parquet'$"),
        ("captions/train-00000.parquet", _EXPECTED_SHARD + "got 'captions/"),
    ],
)
def test_manifest_shard_paths_must_be_the_writers_layout(
    tmp_path: Path, path: str, message: str
) -> None:
    store = _write_store(tmp_path / "store")
    _tamper(store, _set_shard_path(path))
    with pytest.raises(StoreError, match=message):
        open_store(store)


def test_a_shard_outside_the_store_is_not_read_even_with_a_valid_checksum(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _write_store(tmp_path / "store")
    shutil.copy(store / "captions" / "train-00000.parquet", tmp_path / "outside.parquet")
    _tamper(store, _set_shard_path("../outside.parquet", "caption_shards"))
    with pytest.raises(
        StoreError,
        match=r"field 'splits\.train\.caption_shards\[0\]\.path': expected "
        r"'captions/train-00000\.parquet' \(shard 0 of split 'train' lives at "
        r"captions/<split>-<k:05d>\.parquet inside the store\), got '\.\./outside\.parquet', "
        r"which has a '\.\.' segment",
    ):
        open_store(store)
    assert inspect_cli.main([str(store)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {store / MANIFEST}, field ") and "Traceback" not in err


def test_a_shard_listed_out_of_order_is_refused(tmp_path: Path) -> None:
    store = _write_store(tmp_path / "store")

    def second_shard(manifest: dict[str, Any]) -> None:
        shards = manifest["splits"]["train"]["image_shards"]
        shards.append({**shards[0], "path": "images/train-00000.parquet"})

    _tamper(store, second_shard)
    with pytest.raises(
        StoreError, match=r"image_shards\[1\]\.path': expected 'images/train-00001\.parquet'"
    ):
        open_store(store)


@pytest.mark.parametrize("split", ["../outside", "a/b", "..", "", "val\\x", "tra\x00in"])
def test_manifest_split_names_must_be_plain_names(tmp_path: Path, split: str) -> None:
    store = _write_store(tmp_path / "store")

    def rename(manifest: dict[str, Any]) -> None:
        info = manifest["splits"].pop("train")
        for key, kind in (("image_shards", "images"), ("caption_shards", "captions")):
            info[key][0]["path"] = f"{kind}/{split}-00000.parquet"  # consistent with the name
        manifest["splits"][split] = info

    _tamper(store, rename)
    with pytest.raises(
        StoreError,
        match=r"manifest\.json, field 'splits': expected split names made of letters, digits, "
        rf"'\.', '_' and '-', .*got {re.escape(repr(split))}, which ",
    ):
        open_store(store)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("../../etc", "has a '..' segment"),
        ("world/../../etc", "has a '..' segment"),
        ("/etc", "is an absolute path"),
        ("world\\senteval", _BACKSLASH),
        ("world//senteval", _EMPTY_SEGMENT),
        ("world/senteval/", _EMPTY_SEGMENT),
        ("", "is empty"),
        ("world\x00", "contains a NUL character"),
        (7, "is not a string (int)"),
        (["world", "senteval"], "is not a string (list)"),
    ],
)
def test_manifest_extras_must_be_store_relative_paths(
    tmp_path: Path, value: Any, problem: str
) -> None:
    store = _write_store(tmp_path / "store", extras={"world": "world", "senteval": "world/s"})
    assert open_store(store).manifest.extras == {"world": "world", "senteval": "world/s"}

    def change(manifest: dict[str, Any]) -> None:
        manifest["extras"]["senteval"] = value

    _tamper(store, change)
    with pytest.raises(StoreError) as err:
        open_store(store)
    assert str(err.value) == (
        f"{store / MANIFEST}, field 'extras.senteval': expected a store-relative path "
        f"('/'-separated, inside the store), got {value!r}, which {problem}"
    )


def test_manifest_extras_must_be_an_object(tmp_path: Path) -> None:
    store = _write_store(tmp_path / "store")
    _tamper(store, lambda manifest: manifest.update(extras=["world/senteval"]))
    with pytest.raises(StoreError, match=r"field 'extras': expected a JSON object, got list"):
        open_store(store)


def test_resuming_a_build_over_a_tampered_manifest_is_refused(tmp_path: Path) -> None:
    store = _write_store(tmp_path / "store")
    _tamper(store, _set_shard_path("../../etc/passwd"))
    with pytest.raises(StoreError, match=_IMAGE_SHARD):
        StoreWriter(store, fingerprint={"source": "test"}, feature_dim=4)


# --- Karpathy JSON: filename and filepath ----------------------------------------------

_BAD_IMAGE_PATHS = [
    ("../../etc/passwd", "has a '..' segment"),
    ("sub/../../x.jpg", "has a '..' segment"),
    ("/etc/passwd", "is an absolute path"),
    ("C:/photos/x.jpg", "is an absolute path"),
    ("..\\x.jpg", _BACKSLASH),
    ("a//x.jpg", _EMPTY_SEGMENT),
    ("./1001_dog.jpg", "has a '.' segment"),
    ("", "is empty"),
    ("x.jpg\x00.png", "contains a NUL character"),
    ("x\n.jpg", "contains a control character"),
]


@pytest.mark.parametrize(("filename", "problem"), _BAD_IMAGE_PATHS)
def test_flickr_filenames_must_stay_in_the_images_directory(
    tmp_path: Path, filename: str, problem: str
) -> None:
    entries = [flickr_entry(0, "train"), flickr_entry(1, "test")]
    entries[1]["filename"] = filename
    path = write_json(tmp_path / "dataset_flickr8k.json", "flickr8k", entries)
    with pytest.raises(StoreError) as err:
        read_karpathy_json(path)
    assert str(err.value) == (
        f"{path}, field 'images[1].filename': expected a '/'-separated path inside the "
        f"--images directory, got {filename!r}, which {problem}"
    )


@pytest.mark.parametrize("key", ["filepath", "filename"])
@pytest.mark.parametrize(("value", "problem"), _BAD_IMAGE_PATHS[:4])
def test_coco_filepath_and_filename_must_stay_in_the_images_directory(
    tmp_path: Path, key: str, value: str, problem: str
) -> None:
    entry = coco_entry(0, "val")
    entry[key] = value
    path = write_json(tmp_path / "dataset_coco.json", "coco", [entry])
    with pytest.raises(StoreError, match=re.escape(f"field 'images[0].{key}': expected a '/'")):
        read_karpathy_json(path)


def test_nested_relative_image_paths_are_accepted(tmp_path: Path) -> None:
    entry = flickr_entry(0, "train")
    entry["filename"] = "part-1/1000_dog.jpg"
    data = read_karpathy_json(write_json(tmp_path / "dataset_flickr8k.json", "flickr8k", [entry]))
    assert data.images["train"][0].image_id == "part-1/1000_dog.jpg"


def test_build_refuses_an_escaping_filename_before_writing_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entries = [flickr_entry(0, "train")]
    write_images(tmp_path / "images", entries)
    (tmp_path / "secret.jpg").write_bytes((tmp_path / "images" / "1000_dog.jpg").read_bytes())
    entries[0]["filename"] = "../secret.jpg"
    json_path = write_json(tmp_path / "dataset_flickr8k.json", "flickr8k", entries)
    out = tmp_path / "store"
    args = ["karpathy", "--json", str(json_path), "--images", str(tmp_path / "images")]
    assert build.main([*args, "--out", str(out), "--weights", "random"]) == 2
    err = capsys.readouterr().err
    assert f"error: {json_path}, field 'images[0].filename': expected a '/'-separated" in err
    assert "Traceback" not in err
    assert not out.exists()


def test_resolve_image_path_is_lexical_and_follows_links_inside(tmp_path: Path) -> None:
    """Decision: a symlink inside --images is the directory owner's, so it is followed
    (COCO's train2014 often links to a shared disk); only the JSON's text is checked."""
    images, shared = tmp_path / "images", tmp_path / "shared" / "train2014"
    shared.mkdir(parents=True)
    (shared / "x.jpg").write_bytes(b"jpeg")
    images.mkdir()
    (images / "train2014").symlink_to(shared, target_is_directory=True)
    resolved = resolve_image_path(images, "train2014/x.jpg")
    assert resolved == images.resolve() / "train2014" / "x.jpg"
    assert resolved.read_bytes() == b"jpeg"
    for relpath in ("../shared/train2014/x.jpg", str(shared / "x.jpg"), "train2014/../../x"):
        with pytest.raises(StoreError, match="escapes the images directory"):
            resolve_image_path(images, relpath)


# --- SentEval suite.json -----------------------------------------------------------------


def _suite_dir(tmp_path: Path, sts: dict[str, Any]) -> Path:
    root = tmp_path / "downstream"
    write_sts_subtask(root, "STS12", "captions")
    write_sick(root)
    suite = {"name": "w", "sts": sts, "supervised": ["SICK-R"]}
    (root / "suite.json").write_text(json.dumps(suite), encoding="utf-8")
    return root


_BAD_NAMES = [
    ("../captions", "has a '..' segment"),
    ("..", "has a '..' segment"),
    ("a..b", "contains '..'"),
    (".", "has a '.' segment"),
    (".hidden", "does not start with a letter or a digit"),
    ("a/b", "contains '/'"),
    ("a\\b", _BACKSLASH),
    ("/abs", "is an absolute path"),
    ("cap\x00tions", "contains a NUL character"),
    ("", "is empty"),
    ("two words", "contains ' '"),
    ("caf\u00e9", "contains '\u00e9'"),
]


@pytest.mark.parametrize(("name", "problem"), _BAD_NAMES)
def test_suite_subtask_names_must_be_plain_names(tmp_path: Path, name: str, problem: str) -> None:
    root = _suite_dir(tmp_path, {"STS12": ["captions", name]})
    with pytest.raises(StoreError) as err:
        load_suite(root)
    assert str(err.value) == (
        f"{root / 'suite.json'}, field 'sts.STS12': expected names made of letters, digits, "
        "'.', '_' and '-', starting with a letter or a digit, without '..' (they become "
        f"file and directory names), got {name!r}, which {problem}"
    )


@pytest.mark.parametrize(("name", "problem"), _BAD_NAMES)
def test_suite_year_names_must_be_plain_names(tmp_path: Path, name: str, problem: str) -> None:
    root = _suite_dir(tmp_path, {"STS12": ["captions"], name: ["captions"]})
    with pytest.raises(
        StoreError, match=rf"suite\.json, field 'sts': .*which {re.escape(problem)}"
    ):
        load_senteval(root)


def test_a_suite_cannot_point_at_files_outside_the_senteval_directory(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write_sts_subtask(outside, "STS12", "captions")  # real files the escape would reach
    root = _suite_dir(tmp_path, {"../../outside/STS/STS12": ["captions"]})
    assert (root / "STS" / "../../outside/STS/STS12-en-test" / "STS.gs.captions.txt").is_file()
    with pytest.raises(StoreError, match=r"field 'sts': .*which has a '\.\.' segment"):
        load_senteval(root)


def test_valid_suite_names_still_load(tmp_path: Path) -> None:
    root = _suite_dir(tmp_path, {"STS12": ["captions"]})
    assert load_senteval(root).sts["STS12"]["captions"].name == "STS12/captions"


def test_paths_module_examples_run() -> None:
    assert doctest.testmod(_paths).failed == 0
