"""The Parquet feature store: write, read back, resume, verify, and reject bad stores."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage import FeatureStore, StoreError, StoreWriter, open_store
from storage import inspect as inspect_cli
from storage._schema import BUILD_STATE, MANIFEST
from tests.corrupt import flip_byte

DIM = 16
FINGERPRINT = {"source": "test", "seed": 1}


def _split_rows(rng: np.random.Generator, split: str, n: int):
    ids = [f"{split}/{i:04d}.jpg" for i in range(n)]
    features = rng.standard_normal((n, DIM)).astype(np.float32)
    captions = [[f"{split} image {i} caption {k}" for k in range(5)] for i in range(n)]
    return ids, features, captions


def write_store(
    out: Path | str,
    sizes: dict[str, int],
    shard_size: int = 4,
    dtype: str = "float32",
    compression: str = "lz4",
) -> dict[str, tuple]:
    rng = np.random.default_rng(0)
    writer = StoreWriter(
        out,
        fingerprint=FINGERPRINT,
        feature_dim=DIM,
        feature_dtype=dtype,
        feature_compression=compression,
    )
    data, records = {}, {}
    for split, n in sizes.items():
        ids, feats, caps = _split_rows(rng, split, n)
        data[split] = ids, feats, caps
        records[split] = [
            writer.write_shard(
                split,
                k,
                ids[s : s + shard_size],
                feats[s : s + shard_size],
                caps[s : s + shard_size],
            )
            for k, s in enumerate(range(0, n, shard_size))
        ]
    writer.finish(dataset="test", feature_extractor={"model": "none"}, splits=records)
    return data


@pytest.mark.parametrize("compression", ["lz4", "zstd", "none"])
def test_round_trip_keeps_every_row_in_order(tmp_path: Path, compression: str) -> None:
    data = write_store(tmp_path / "s", {"train": 10, "val": 3, "test": 0}, compression=compression)
    store = open_store(tmp_path / "s")
    assert store.splits == ("train", "val", "test")
    for split, (ids, feats, caps) in data.items():
        got = store.read_split(split)
        assert list(got.image_ids) == ids
        np.testing.assert_array_equal(got.features, feats)
        assert got.features.flags.c_contiguous and got.features.dtype == np.float32
        assert got.captions.shape == (len(ids), 5)
        assert got.captions.tolist() == caps
    assert store.manifest.splits["train"].images == 10
    assert store.manifest.splits["train"].captions == 50
    assert len(store.manifest.splits["train"].image_shards) == 3


def test_float16_store_and_file_uri(tmp_path: Path) -> None:
    data = write_store(tmp_path / "s", {"train": 5}, dtype="float16")
    got = open_store((tmp_path / "s").as_uri()).read_split("train")
    assert got.features.dtype == np.float16
    np.testing.assert_array_equal(got.features, data["train"][1].astype(np.float16))


def test_manifest_records_counts_and_checksums(tmp_path: Path) -> None:
    write_store(tmp_path / "s", {"train": 6})
    manifest = json.loads((tmp_path / "s" / MANIFEST).read_text())
    assert manifest["schema_version"] == 1 and manifest["feature_dim"] == DIM
    shard = manifest["splits"]["train"]["image_shards"][0]
    assert shard["rows"] == 4 and len(shard["sha256"]) == 64
    assert not (tmp_path / "s" / BUILD_STATE).exists()
    assert open_store(tmp_path / "s").verify() == 4


def test_resume_keeps_finished_shards_and_refuses_a_different_store(tmp_path: Path) -> None:
    out = tmp_path / "s"
    writer = StoreWriter(out, fingerprint=FINGERPRINT, feature_dim=DIM)
    ids, feats, caps = _split_rows(np.random.default_rng(0), "train", 4)
    first = writer.write_shard("train", 0, ids, feats, caps, skipped_images=["x.jpg"])
    # The process dies here: no manifest, so the store is not open-able yet.
    with pytest.raises(StoreError, match="did not finish"):
        open_store(out)
    again = StoreWriter(out, fingerprint=FINGERPRINT, feature_dim=DIM)
    assert again.manifest is None
    assert again.existing_shard("train", 0) == first
    assert again.existing_shard("train", 1) is None
    with pytest.raises(StoreError, match=r"different store.*seed"):
        StoreWriter(out, fingerprint={**FINGERPRINT, "seed": 2}, feature_dim=DIM)
    again.finish(dataset="test", feature_extractor={}, splits={"train": [first]})
    assert StoreWriter(out, fingerprint=FINGERPRINT, feature_dim=DIM).manifest is not None
    assert open_store(out).manifest.splits["train"].skipped_images == ("x.jpg",)


def test_refuses_a_non_empty_directory_that_is_not_a_store(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(StoreError, match="not empty"):
        StoreWriter(tmp_path, fingerprint=FINGERPRINT, feature_dim=DIM)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_open_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not a feature store"):
        open_store(tmp_path)
    write_store(tmp_path / "s", {"train": 2})
    manifest = json.loads((tmp_path / "s" / MANIFEST).read_text())
    del manifest["feature_dim"]
    (tmp_path / "s" / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(StoreError, match=r"manifest.json, field 'feature_dim': missing"):
        open_store(tmp_path / "s")
    with pytest.raises(StoreError, match="no split 'dev'"):
        write_store(tmp_path / "t", {"train": 2})
        open_store(tmp_path / "t").read_split("dev")


def _rewrite_shard(path: Path, table: pa.Table) -> None:
    pq.write_table(table, path)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    write_store(tmp_path / "s", {"train": 8, "val": 4})
    return tmp_path / "s"


def test_checksum_mismatch_names_the_shard(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shard = store / "images" / "train-00001.parquet"
    table = pq.read_table(shard)
    _rewrite_shard(shard, table)  # same content, different bytes
    assert inspect_cli.main([str(store)]) == 2
    err = capsys.readouterr().err
    assert "train-00001.parquet: checksum mismatch" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("shard", ["images/train-00001.parquet", "captions/val-00000.parquet"])
@pytest.mark.parametrize("position", [0.0, 0.3, 0.5, 0.97, 1.0])
def test_one_flipped_byte_anywhere_is_caught_by_a_verified_read(
    store: Path, shard: str, position: float
) -> None:
    """Wherever the byte is (magic, data page, footer), a verified read names the shard;
    so do ``verify`` and ``storage.inspect``."""
    flip_byte(store / shard, position)
    split = shard.split("/")[1].split("-")[0]
    opened = open_store(store)
    with pytest.raises(StoreError, match=rf"{shard}: checksum mismatch"):
        opened.read_split(split, verify=True)
    with pytest.raises(StoreError, match=rf"{shard}: checksum mismatch"):
        opened.verify()


def test_an_unverified_read_trusts_the_bytes(tmp_path: Path) -> None:
    """What ``--no-verify`` gives up: a flipped byte inside the feature data (stored
    uncompressed, the default) reads back as another number, silently."""
    write_store(tmp_path / "s", {"train": 8}, compression="none")
    before = open_store(tmp_path / "s").read_split("train").features
    shard = tmp_path / "s" / "images" / "train-00001.parquet"
    raw = shard.read_bytes()
    offset = raw.index(before[5, 3].tobytes()) + 3  # row 1 of shard 1: its exponent byte
    shard.write_bytes(raw[:offset] + bytes([raw[offset] ^ 0x40]) + raw[offset + 1 :])
    after = open_store(tmp_path / "s").read_split("train").features
    assert np.argwhere(before != after).tolist() == [[5, 3]]
    with pytest.raises(StoreError, match=r"train-00001\.parquet: checksum mismatch"):
        open_store(tmp_path / "s").read_split("train", verify=True)


def test_wrong_dimension_is_rejected_by_name(store: Path) -> None:
    shard = store / "images" / "val-00000.parquet"
    table = pq.read_table(shard)
    narrow = pa.array([b"\0" * 8] * table.num_rows, pa.binary(8))
    _rewrite_shard(shard, table.set_column(1, "feature", narrow))
    with pytest.raises(
        StoreError,
        match=r"val-00000.parquet: column 'feature' has type "
        r"fixed_size_binary\[8\], expected fixed_size_binary\[64\]",
    ):
        open_store(store).read_split("val")


def test_missing_column_and_missing_shard(store: Path) -> None:
    shard = store / "captions" / "train-00000.parquet"
    _rewrite_shard(shard, pq.read_table(shard).drop_columns(["caption"]))
    with pytest.raises(StoreError, match=r"train-00000.parquet: column 'caption' missing"):
        open_store(store).read_split("train")
    (store / "images" / "val-00000.parquet").unlink()
    with pytest.raises(
        StoreError, match=r"val-00000.parquet: shard listed in the manifest is missing"
    ):
        open_store(store).read_split("val")


def test_misaligned_captions_are_detected(store: Path) -> None:
    shard = store / "captions" / "val-00000.parquet"
    table = pq.read_table(shard)
    ids = table.column("image_id").to_pylist()
    ids[0], ids[5] = ids[5], ids[0]
    _rewrite_shard(
        shard, table.set_column(0, pa.field("image_id", pa.string(), nullable=False), pa.array(ids))
    )
    with pytest.raises(StoreError, match="not aligned"):
        FeatureStore.open(store).read_split("val")


def test_inspect_prints_a_line_per_split(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert inspect_cli.main([str(store)]) == 0
    out = capsys.readouterr().out
    assert "train             8 images        40 captions in 2 shards" in out
    assert "val               4 images        20 captions in 1 shards" in out
    assert "verified   6 shards" in out


def test_inspect_of_a_copy_on_another_path(store: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    assert open_store(copy.as_uri()).verify() == 6


def test_features_that_do_not_fit_the_dtype_are_refused(tmp_path: Path) -> None:
    writer = StoreWriter(
        tmp_path / "s", fingerprint=FINGERPRINT, feature_dim=DIM, feature_dtype="float16"
    )
    ids, feats, caps = _split_rows(np.random.default_rng(0), "train", 3)
    feats[1, 2] = 1e6
    with pytest.raises(
        StoreError,
        match=r"image 'train/0001.jpg' are not finite as float16 "
        r"\(beyond float16's range",
    ):
        writer.write_shard("train", 0, ids, feats, caps)
    assert writer.existing_shard("train", 0) is None
