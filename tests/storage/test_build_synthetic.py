"""`python -m storage.build synthetic`: the embedded world through the real ingestion path,
including an interrupted build that resumes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from storage import build, open_store
from storage._extractors import ImageItem
from storage._writer import StoreWriter
from storage.karpathy import ingest, read_karpathy_json
from storage.synthetic import SceneProjectionExtractor, generate_world


def test_build_then_inspect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "w"
    assert build.main(["synthetic", "--out", str(out), "--images", "50", "--seed", "3"]) == 0
    assert "train            40 images       200 captions in 1 shards" in capsys.readouterr().out
    store = open_store(out)
    assert store.manifest.dataset == "synthetic"
    assert store.manifest.extras["senteval"] == "world/senteval"
    assert (out / "world" / "senteval" / "suite.json").exists()
    assert store.verify() == 6
    # A second run finds the finished store and changes nothing.
    before = (out / "manifest.json").read_bytes()
    assert build.main(["synthetic", "--out", str(out), "--images", "50", "--seed", "3"]) == 0
    assert (out / "manifest.json").read_bytes() == before
    # Another world into the same directory is refused.
    assert build.main(["synthetic", "--out", str(out), "--images", "50", "--seed", "4"]) == 2
    assert (
        "already holds a different store (it differs in extractor, seed)" in capsys.readouterr().err
    )


def test_splits_of_a_given_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Val and test sets of a fixed size, as Karpathy's splits hold (Flickr8k's 1,000
    images each), the rest for training: the same scenes, only the split boundaries
    move; a store built with other splits is another store."""
    default, sized = tmp_path / "default", tmp_path / "sized"
    argv = ["synthetic", "--images", "60", "--seed", "3"]
    assert build.main([*argv, "--out", str(default)]) == 0
    assert build.main([*argv, "--out", str(sized), "--val-images", "5", "--test-images", "13"]) == 0
    counts = {s: c.images for s, c in open_store(sized).manifest.splits.items()}
    assert counts == {"train": 42, "val": 5, "test": 13}
    world = json.loads((sized / "world" / "world.json").read_text())
    assert world["splits"] == {"train": 42, "val": 5, "test": 13}
    a, b = (
        json.loads((d / "world" / "dataset_synthetic.json").read_text()) for d in (default, sized)
    )
    assert [i["sentences"] for i in a["images"]] == [i["sentences"] for i in b["images"]]
    assert [i["split"] for i in a["images"]] != [i["split"] for i in b["images"]]
    # 10% each is the default: giving it is the same store, another size is not.
    again = [*argv, "--out", str(default), "--val-images", "6", "--test-images", "6"]
    assert build.main(again) == 0
    capsys.readouterr()
    assert build.main([*argv, "--out", str(default), "--val-images", "7"]) == 2
    assert "already holds a different store (it differs in splits)" in capsys.readouterr().err


class _Interrupted(Exception):
    pass


class _DiesAfter:
    """The real extractor, with a crash injected after ``calls`` shards."""

    def __init__(self, calls: int) -> None:
        self.inner = SceneProjectionExtractor()
        self.dim = self.inner.dim
        self.left = calls

    def describe(self) -> dict:
        return self.inner.describe()

    def extract(self, items: Sequence[ImageItem]):
        if self.left == 0:
            raise _Interrupted
        self.left -= 1
        return self.inner.extract(items)


def test_interrupted_build_resumes_without_duplicates_or_gaps(tmp_path: Path) -> None:
    world = generate_world(tmp_path / "world", n_images=100, seed=1, render=False)
    source = read_karpathy_json(world.dataset_json)

    def run(out: Path, extractor) -> None:
        writer = StoreWriter(out, fingerprint={"test": 1}, feature_dim=2048)
        ingest(source, world.images, extractor, writer, shard_size=16)

    run(tmp_path / "straight", SceneProjectionExtractor())
    with pytest.raises(_Interrupted):
        run(tmp_path / "resumed", _DiesAfter(calls=3))  # train shards 1-3 of 5 written
    assert not (tmp_path / "resumed" / "manifest.json").exists()
    assert len(list((tmp_path / "resumed" / "images").glob("*.parquet"))) == 3
    run(tmp_path / "resumed", SceneProjectionExtractor())
    straight, resumed = open_store(tmp_path / "straight"), open_store(tmp_path / "resumed")
    assert resumed.verify() == straight.verify()
    for split in ("train", "val", "test"):
        a, b = straight.read_split(split), resumed.read_split(split)
        assert list(a.image_ids) == list(b.image_ids)
        assert len(set(b.image_ids)) == len(b.image_ids)
        np.testing.assert_array_equal(a.features, b.features)
        np.testing.assert_array_equal(a.captions, b.captions)


@pytest.mark.slow
def test_resnet_features_of_the_rendered_images(tmp_path: Path) -> None:
    out = tmp_path / "w"
    assert (
        build.main(
            [
                "synthetic",
                "--out",
                str(out),
                "--images",
                "10",
                "--features",
                "resnet",
                "--weights",
                "random",
                "--device",
                "cpu",
                "--workers",
                "0",
            ]
        )
        == 0
    )
    store = open_store(out)
    assert store.manifest.feature_extractor["model"] == "resnet152"
    train = store.read_split("train")
    assert train.features.shape == (8, 2048) and (train.features >= 0).all()
    assert len(np.unique(train.features[:, :4], axis=0)) == 8  # distinct images
