"""Tests for storage.features: image decoding, the ten-crop transform, weights and extraction.

Offline: the "ImageNet" weights are a seeded, untrained torchvision ResNet-152 saved to a
file here. ResNet-152 runs on the CPU, so the end-to-end tests share one extractor and a
handful of tiny images.
"""

from __future__ import annotations

import hashlib
import logging
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image

from storage._errors import StoreError
from storage._extractors import ImageItem
from storage.features import (
    RESNET152_FILENAME,
    ResNetExtractor,
    default_weights_path,
    load_image_rgb,
    resolve_weights,
    ten_crop_transform,
)

SEED = 3
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def _noise(mode: str, size: tuple[int, int], seed: int = 0) -> Image.Image:
    """A random RGB image of ``size`` (width, height) converted to ``mode``."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
    return Image.fromarray(pixels).convert(mode)


def _palette_with_transparency(size: tuple[int, int]) -> Image.Image:
    image = _noise("RGB", size).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    image.info["transparency"] = 0  # palette entry 0 is transparent
    return image


def _grey16(size: tuple[int, int]) -> Image.Image:
    ramp = np.linspace(0, 65535, size[0] * size[1]).astype(np.uint16)
    return Image.fromarray(ramp.reshape(size[1], size[0]))


# name, (image factory, file suffix): every mode and an odd size each
IMAGE_CASES: dict[str, tuple[Callable[[], Image.Image], str]] = {
    "rgb-jpeg-640x480": (lambda: _noise("RGB", (640, 480)), ".jpg"),
    "l-jpeg-13x300": (lambda: _noise("L", (13, 300)), ".jpg"),
    "cmyk-jpeg-301x17": (lambda: _noise("CMYK", (301, 17)), ".jpg"),
    "rgba-png-1x1": (lambda: _noise("RGBA", (1, 1)), ".png"),
    "la-png-9x4": (lambda: _noise("LA", (9, 4)), ".png"),
    "p-transparency-png-640x480": (lambda: _palette_with_transparency((640, 480)), ".png"),
    "p-png-31x7": (lambda: _noise("P", (31, 7)), ".png"),
    "i16-png-37x23": (lambda: _grey16((37, 23)), ".png"),
    "1-png-13x300": (lambda: _noise("1", (13, 300)), ".png"),
}


@pytest.mark.parametrize("case", sorted(IMAGE_CASES))
def test_load_image_rgb_any_mode_and_size(tmp_path: Path, case: str) -> None:
    factory, suffix = IMAGE_CASES[case]
    original = factory()
    path = tmp_path / f"{case}{suffix}"
    original.save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. PIL's palette-transparency warning
        loaded = load_image_rgb(path)
    assert loaded.mode == "RGB"
    assert loaded.size == original.size


def test_load_image_rgb_scales_16_bit_grey_without_saturating(tmp_path: Path) -> None:
    values = np.array([[0, 257, 32896, 65535]], dtype=np.uint16)
    Image.fromarray(values).save(tmp_path / "grey16.png")
    rgb = np.asarray(load_image_rgb(tmp_path / "grey16.png"))
    np.testing.assert_array_equal(rgb[0, :, 0], [0, 1, 128, 255])
    np.testing.assert_array_equal(rgb[..., 0], rgb[..., 2])


def test_load_image_rgb_scales_int_and_float_grey(tmp_path: Path) -> None:
    Image.fromarray(np.array([[0, 32896, 65535]], dtype=np.int32)).save(tmp_path / "i.tif")
    Image.fromarray(np.array([[0.0, 0.5, 1.0]], dtype=np.float32)).save(tmp_path / "f.tif")
    Image.fromarray(np.array([[-1.0, 0.0, 3.0]], dtype=np.float32)).save(tmp_path / "g.tif")
    assert np.asarray(load_image_rgb(tmp_path / "i.tif"))[0, :, 1].tolist() == [0, 128, 255]
    assert np.asarray(load_image_rgb(tmp_path / "f.tif"))[0, :, 1].tolist() == [0, 128, 255]
    assert np.asarray(load_image_rgb(tmp_path / "g.tif"))[0, :, 1].tolist() == [0, 64, 255]


def test_ten_crop_shape_and_mirrors() -> None:
    crops = ten_crop_transform()(_noise("RGB", (301, 17)))
    assert crops.shape == (10, 3, 224, 224)
    assert crops.dtype == torch.float32
    for k in range(5):
        torch.testing.assert_close(crops[5 + k], crops[k].flip(-1), rtol=0, atol=0)
    assert not torch.equal(crops[0], crops[1])  # the resized image is 4532 wide


def test_ten_crop_of_1x1_image_is_constant() -> None:
    crops = ten_crop_transform()(Image.new("RGB", (1, 1), (255, 0, 128)))
    assert crops.shape == (10, 3, 224, 224)
    expected = (np.array([255, 0, 128]) / 255 - MEAN) / STD
    np.testing.assert_allclose(crops.amax(dim=(0, 2, 3)).numpy(), expected, atol=1e-5)
    np.testing.assert_allclose(crops.amin(dim=(0, 2, 3)).numpy(), expected, atol=1e-5)


def test_ten_crop_of_256_square_matches_manual_normalisation() -> None:
    image = _noise("RGB", (256, 256), seed=1)
    crops = ten_crop_transform()(image).numpy()
    pixels = np.asarray(image).astype(np.float32) / 255

    def manual(top: int, left: int) -> np.ndarray:
        window = pixels[top : top + 224, left : left + 224]
        return ((window - MEAN) / STD).transpose(2, 0, 1)

    np.testing.assert_allclose(crops[4], manual(16, 16), atol=1e-5)  # centre
    np.testing.assert_allclose(crops[0], manual(0, 0), atol=1e-5)  # top-left
    np.testing.assert_allclose(crops[3], manual(32, 32), atol=1e-5)  # bottom-right
    np.testing.assert_allclose(crops[9], manual(16, 16)[..., ::-1], atol=1e-5)  # mirrored centre


def test_resolve_weights_missing_path_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "resnet.pth"
    with pytest.raises(StoreError, match=re.escape(str(missing))) as info:
        resolve_weights(str(missing))
    assert "IMAGENET1K_V1" in str(info.value)


def test_resolve_weights_default_names_the_cache_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    expected = default_weights_path()
    assert expected == tmp_path / "hub" / "checkpoints" / RESNET152_FILENAME
    with pytest.raises(StoreError) as info:
        resolve_weights(None)
    assert str(expected) in str(info.value)
    assert "--weights" in str(info.value)
    expected.parent.mkdir(parents=True)
    expected.write_bytes(b"present")
    assert resolve_weights(None) == expected.resolve()


def test_resolve_weights_random_and_existing(tmp_path: Path) -> None:
    assert resolve_weights("random") == "random"
    (tmp_path / "w.pth").write_bytes(b"x")
    assert resolve_weights(str(tmp_path / "w.pth")) == (tmp_path / "w.pth").resolve()


def test_extractor_fails_on_missing_weights_before_building(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"absent\.pth"):
        ResNetExtractor(str(tmp_path / "absent.pth"))


def test_garbage_weights_file_is_a_store_error(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(StoreError, match=r"garbage\.pth"):
        ResNetExtractor(str(garbage))
    not_a_dict = tmp_path / "list.pth"
    torch.save([torch.zeros(2)], not_a_dict)
    with pytest.raises(StoreError, match=r"list\.pth.*list"):
        ResNetExtractor(str(not_a_dict))


def test_wrong_state_dict_is_a_store_error(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.pth"
    torch.save({"fc.weight": torch.zeros(3, 3)}, wrong)
    with pytest.raises(StoreError, match=r"wrong\.pth.*ResNet-152"):
        ResNetExtractor(str(wrong))


# --- end to end: one seeded random ResNet-152 shared by the module ---------------------


@pytest.fixture(scope="module")
def extractor() -> ResNetExtractor:
    torch.set_num_threads(2)
    return ResNetExtractor("random", device="cpu", batch_size=2, seed=SEED)


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("images")
    _noise("RGB", (40, 30), seed=5).save(root / "good1.jpg")
    _noise("L", (13, 300), seed=6).save(root / "good2.png")
    _noise("RGB", (64, 64), seed=7).save(root / "full.jpg")
    data = (root / "full.jpg").read_bytes()
    (root / "truncated.jpg").write_bytes(data[: len(data) // 2])
    (root / "garbage.jpg").write_bytes(np.random.default_rng(8).bytes(500))
    return root


def _items(root: Path, *names: str) -> list[ImageItem]:
    return [ImageItem(name, root / name, {"filename": name}) for name in names]


@pytest.fixture(scope="module")
def alone(extractor: ResNetExtractor, image_dir: Path) -> dict[str, np.ndarray]:
    """Each good image's features, computed in a call of its own."""
    result = {}
    for name in ("good1.jpg", "good2.png"):
        features, errors = extractor.extract(_items(image_dir, name))
        assert errors == [None]
        result[name] = features[0]
    return result


@pytest.mark.slow
def test_features_are_2048_d_non_negative_and_distinct(alone: dict[str, np.ndarray]) -> None:
    first, second = alone["good1.jpg"], alone["good2.png"]
    assert first.shape == (2048,) and first.dtype == np.float32
    assert (first >= 0).all() and (second >= 0).all()  # average pool of post-ReLU maps
    assert first.any() and not np.allclose(first, second)


@pytest.mark.slow
def test_bad_images_do_not_lose_the_batch(
    extractor: ResNetExtractor,
    image_dir: Path,
    alone: dict[str, np.ndarray],
    caplog: pytest.LogCaptureFixture,
) -> None:
    names = ("good1.jpg", "missing.jpg", "truncated.jpg", "good2.png", "garbage.jpg")
    with caplog.at_level(logging.INFO, logger="storage.features"):
        features, errors = extractor.extract(_items(image_dir, *names))  # batches of 2
    assert features.shape == (5, 2048) and features.dtype == np.float32
    assert errors[0] is None and errors[3] is None
    assert errors[1] == "missing"
    assert errors[2] is not None and errors[2].startswith("unreadable: ")
    assert "truncated" in errors[2]
    assert errors[4] is not None and errors[4].startswith("unreadable: ")
    assert not features[[1, 2, 4]].any()
    np.testing.assert_allclose(features[0], alone["good1.jpg"], atol=1e-4, rtol=0)
    np.testing.assert_allclose(features[3], alone["good2.png"], atol=1e-4, rtol=0)
    assert "5 images (3 failed)" in caplog.text and "images/s" in caplog.text


def test_extract_empty_and_all_bad_with_workers(
    extractor: ResNetExtractor, image_dir: Path
) -> None:
    features, errors = extractor.extract([])
    assert features.shape == (0, 2048) and errors == []
    extractor.num_workers = 1
    try:
        features, errors = extractor.extract(_items(image_dir, "garbage.jpg", "missing.jpg"))
    finally:
        extractor.num_workers = 0
    assert errors[1] == "missing" and errors[0] is not None
    assert errors[0].startswith("unreadable: ")
    assert features.shape == (2, 2048) and not features.any()


def test_describe_random(extractor: ResNetExtractor) -> None:
    assert extractor.dim == 2048
    assert extractor.describe() == {
        "model": "resnet152",
        "weights": "random",
        "weights_sha256": None,
        "crops": "ten-crop 224 of shorter-side 256, mean of 10",
        "normalisation": "imagenet",
        "seed": SEED,
    }


@pytest.mark.slow
def test_weights_file_matches_random_init_with_same_seed(
    tmp_path: Path, image_dir: Path, alone: dict[str, np.ndarray]
) -> None:
    torch.manual_seed(SEED)
    weights = tmp_path / RESNET152_FILENAME
    torch.save(torchvision.models.resnet152().state_dict(), weights)
    loaded = ResNetExtractor(str(weights), device="cpu", batch_size=1)
    features, errors = loaded.extract(_items(image_dir, "good1.jpg"))
    assert errors == [None]
    np.testing.assert_allclose(features[0], alone["good1.jpg"], atol=1e-5, rtol=0)
    description = loaded.describe()
    assert description["weights"] == str(weights.resolve())
    assert description["weights_sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert description["seed"] is None
