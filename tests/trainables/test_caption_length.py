"""A caption longer than ``MAX_CAPTION_CHARS`` (every caption of its split would be
padded to it) is refused by ``storage.build`` before anything is written, by a store's
writer before its shard is written, reported by ``storage.inspect``, and refused when a
store built before is read for training, naming the image and the cost, before any
tensor is built: one ``error:`` line from each command."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage import StoreError, build
from trainables.data import MAX_CAPTION_CHARS, TrainingData
from trainables.train import main

SHARD = "captions/train-00000.parquet"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("captions") / "store"
    assert build.main(["synthetic", "--images", "20", "--out", str(out)]) == 0
    return out


def _with_caption(store: Path, out: Path, length: int) -> Path:
    """A copy of ``store`` whose first training caption has ``length`` characters (its
    shard's checksum updated: a store built from such a source)."""
    shutil.copytree(store, out)
    table = pq.read_table(out / SHARD)
    captions = table.column("caption").to_pylist()
    captions[0] = ("a red circle " * (length // 13 + 1))[:length]
    table = table.set_column(2, "caption", pa.array(captions, pa.string()))
    pq.write_table(table, out / SHARD)
    manifest = json.loads((out / "manifest.json").read_text())
    shard = manifest["splits"]["train"]["caption_shards"][0]
    shard["sha256"] = hashlib.sha256((out / SHARD).read_bytes()).hexdigest()
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def test_a_caption_at_the_bound_trains(tmp_path: Path, store: Path) -> None:
    data = TrainingData.from_store(str(_with_caption(store, tmp_path / "s", MAX_CAPTION_CHARS)))
    assert data.train.tokens.shape[1] >= MAX_CAPTION_CHARS


@pytest.mark.parametrize("length", [MAX_CAPTION_CHARS + 1, 5_500_000])
def test_a_longer_caption_is_refused_with_its_cost(
    tmp_path: Path, store: Path, length: int, capsys: pytest.CaptureFixture[str]
) -> None:
    where = _with_caption(store, tmp_path / "s", length)
    with pytest.raises(StoreError, match=rf"has {length:,} characters.* would take [\d.]+ [MG]iB"):
        TrainingData.from_store(str(where))
    checkpoint = tmp_path / "state.pt"
    code = main(["--data", str(where), "--epochs", "1", "--device", "cpu", "--checkpoint",
                 str(checkpoint)])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "split 'train'" in err[0], err
    assert not checkpoint.exists()


@pytest.mark.parametrize("length", [MAX_CAPTION_CHARS + 1, 5_500_000])
def test_storage_inspect_reports_a_longer_caption(
    tmp_path: Path, store: Path, length: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store built before the build refused such captions: inspect names the caption
    and its cost, one error line; the store is left as it is."""
    from storage import inspect as inspect_cli

    where = _with_caption(store, tmp_path / "s", length)
    before = {p: p.read_bytes() for p in where.rglob("*") if p.is_file()}
    capsys.readouterr()
    code = inspect_cli.main([str(where)])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert code == 2 and len(err) == 1, err
    assert f"has {length:,} characters" in err[0] and "split 'train'" in err[0], err
    assert (
        re.search(r"would take [\d.]+ [MG]iB", err[0])
        and f"at most {MAX_CAPTION_CHARS:,}" in err[0]
    )
    assert {p: p.read_bytes() for p in where.rglob("*") if p.is_file()} == before
    assert inspect_cli.main([str(store)]) == 0  # the bound itself is no problem


@pytest.mark.parametrize("dataset", ["flickr8k", "coco"])
@pytest.mark.parametrize("split", ["train", "restval", "val", "test"])
@pytest.mark.slow
def test_storage_build_refuses_a_longer_caption_before_writing_anything(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], dataset: str, split: str
) -> None:
    """Any split, any format (Flickr's raw sentence, COCO's tokens): the source is refused
    before a feature is extracted or a file written, naming the JSON, the image and the
    cost; such a source with the caption at the bound builds."""
    from tests.storage.cli_runs import assert_refused, karpathy_args, run_main
    from tests.storage.karpathy_files import coco_entry, flickr_entry, write_images, write_json

    entry = coco_entry if dataset == "coco" else flickr_entry
    entries = [entry(k, s) for k, s in enumerate(["train", "val", "test", split])]
    images = tmp_path / "images"
    write_images(images, entries)

    def with_caption(length: int) -> Path:
        words = ("a red circle " * (length // 13 + 1))[:length]
        sentence = entries[3]["sentences"][2]
        sentence["raw"], sentence["tokens"] = words, [words[: length - 2]]  # COCO adds " ."
        return write_json(tmp_path / f"dataset_{dataset}.json", dataset, entries)

    out = tmp_path / "store"
    json_path = with_caption(MAX_CAPTION_CHARS + 1)
    outcome = run_main(build.main, karpathy_args(json_path, images, out), capfd)
    target = "train" if split == "restval" else split
    image = entries[3]["filename"]
    if dataset == "coco":
        image = f"{entries[3]['filepath']}/{image}"
    assert_refused(
        outcome,
        str(json_path),
        f"caption 2 of image {image!r} in split {target!r} has {MAX_CAPTION_CHARS + 1:,} "
        "characters",
        "MiB",
    )
    assert not out.exists()
    if (dataset, split) == ("flickr8k", "train"):  # the bound itself builds (one build: slow)
        with_caption(MAX_CAPTION_CHARS)
        json_path = write_json(json_path, dataset, entries[1:])  # one image a split: 3 to read
        assert run_main(build.main, karpathy_args(json_path, images, out), capfd).status == 0


def test_a_store_writer_refuses_a_longer_caption_before_writing_its_shard(
    tmp_path: Path,
) -> None:
    """Any builder's captions pass the writer: a shard with a longer caption is refused
    whole, nothing of it written."""
    import numpy as np

    from storage import StoreWriter

    writer = StoreWriter(tmp_path / "w", fingerprint={"dataset": "t"}, feature_dim=4)
    captions = [["short"] * 5, ["short"] * 4 + ["x" * (MAX_CAPTION_CHARS + 1)]]
    with pytest.raises(StoreError, match=r"caption 4 of image 'b' in split 'val' has 2,001"):
        writer.write_shard("val", 0, ["a", "b"], np.zeros((2, 4), np.float32), captions)
    assert not list((tmp_path / "w").rglob("*.parquet"))
