"""A caption longer than ``MAX_CAPTION_CHARS`` (every caption of its split would be
padded to it) is refused when the store is read for training, naming the image and the
cost, before any tensor is built: one ``error:`` line from ``trainables.train``."""

from __future__ import annotations

import hashlib
import json
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
    with pytest.raises(StoreError, match=rf"has {length:,} characters.* GiB"):
        TrainingData.from_store(str(where))
    checkpoint = tmp_path / "state.pt"
    code = main(["--data", str(where), "--epochs", "1", "--device", "cpu", "--checkpoint",
                 str(checkpoint)])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "split 'train'" in err[0], err
    assert not checkpoint.exists()
