"""`python -m storage.build karpathy`: the real ingestion path, end to end on tiny files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from storage import build, open_store
from storage import inspect as inspect_cli
from storage.features import ResNetExtractor
from tests.storage.karpathy_files import coco_entry, flickr_entry, write_images, write_json


@pytest.fixture(scope="module")
def random_resnet() -> ResNetExtractor:
    return ResNetExtractor("random", device="cpu", batch_size=4)


@pytest.mark.slow
def test_flickr_build_with_odd_images_and_a_skipped_one(
    tmp_path: Path, random_resnet: ResNetExtractor, capsys: pytest.CaptureFixture[str]
) -> None:
    entries = [
        flickr_entry(0, "train"),
        flickr_entry(1, "val"),
        flickr_entry(2, "test"),
        flickr_entry(3, "train"),
    ]
    json_path = write_json(tmp_path / "dataset_flickr8k.json", "flickr8k", entries)
    images = tmp_path / "Flicker8k_Dataset"
    write_images(images, entries[:1])
    Image.new("CMYK", (300, 17), (0, 80, 160, 10)).save(images / entries[1]["filename"], "JPEG")
    Image.new("L", (13, 301), 200).save(images / entries[2]["filename"], "JPEG")
    # entries[3]'s image is missing.
    args = [
        "karpathy",
        "--json",
        str(json_path),
        "--images",
        str(images),
        "--weights",
        "random",
        "--device",
        "cpu",
        "--workers",
        "0",
    ]
    assert build.main([*args, "--out", str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err
    assert "1003_dog.jpg: image listed in the JSON is missing" in err
    assert "--skip-unreadable" in err and "Traceback" not in err

    out = tmp_path / "store"
    assert build.main([*args, "--out", str(out), "--skip-unreadable"]) == 0
    assert (
        "train             1 images         5 captions in 1 shards (1 unreadable images skipped)"
        in capsys.readouterr().out
    )
    store = open_store(out)
    manifest = store.manifest
    assert manifest.dataset == "flickr8k"
    assert manifest.feature_extractor["model"] == "resnet152"
    assert manifest.feature_extractor["weights"] == "random"
    assert manifest.splits["train"].skipped_images == ("1003_dog.jpg",)
    val = store.read_split("val")
    assert list(val.image_ids) == ["1001_dog.jpg"]
    assert val.captions[0, 4] == "A dog number 1 runs, take 4."
    alone, errors = random_resnet.extract([_item(images, entries[1])])
    assert errors == [None]
    np.testing.assert_allclose(val.features, alone, rtol=1e-4, atol=1e-5)
    assert inspect_cli.main([str(out)]) == 0


def _item(images: Path, entry: dict):
    from storage._extractors import ImageItem

    return ImageItem(entry["filename"], images / entry["filename"], entry)


@pytest.mark.slow
def test_coco_build_reports_truncated_captions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entries = [coco_entry(0, "restval", n_captions=6), coco_entry(1, "val"), coco_entry(2, "test")]
    json_path = write_json(tmp_path / "dataset_coco.json", "coco", entries)
    write_images(tmp_path / "coco", entries, size=(64, 48))
    out = tmp_path / "store"
    assert (
        build.main(
            [
                "karpathy",
                "--json",
                str(json_path),
                "--images",
                str(tmp_path / "coco"),
                "--out",
                str(out),
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
    assert "1 images had > 5 captions, first 5 kept" in capsys.readouterr().out
    train = open_store(out).read_split("train")
    assert train.image_ids.tolist() == ["val2014/COCO_val2014_000000000000.jpg"]
    assert train.captions[0, 0] == "a cat number 0 sits on a mat, take 0 ."
    assert train.features.dtype == np.float32


def test_missing_weights_fail_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    # every split has an image: the JSON's own checks come first (test_build_options)
    entries = [flickr_entry(0, "train"), flickr_entry(1, "val"), flickr_entry(2, "test")]
    json_path = write_json(tmp_path / "dataset_flickr8k.json", "flickr8k", entries)
    write_images(tmp_path / "img", entries)
    out = tmp_path / "store"
    assert (
        build.main(
            [
                "karpathy",
                "--json",
                str(json_path),
                "--images",
                str(tmp_path / "img"),
                "--out",
                str(out),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "resnet152-394f9c45.pth" in err and str(tmp_path / "torch") in err
    assert not out.exists()


def test_bad_json_and_images_dir_fail_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "dataset_flickr8k.json"
    bad.write_text(json.dumps({"images": [{"filename": "x.jpg"}]}))
    out = tmp_path / "store"
    base = ["karpathy", "--json", str(bad), "--out", str(out), "--weights", "random"]
    assert build.main([*base, "--images", str(tmp_path)]) == 2
    assert "images[0].split': missing" in capsys.readouterr().err
    write_json(bad, "flickr8k", [flickr_entry(0, "train")])
    assert build.main([*base, "--images", str(tmp_path / "nowhere")]) == 2
    assert f"--images {tmp_path / 'nowhere'}: not a directory" in capsys.readouterr().err
    assert not out.exists()
