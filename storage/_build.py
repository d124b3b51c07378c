"""Building a feature store, the library behind ``python -m storage.build`` (which the
README documents): from a Karpathy JSON and its images with ResNet-152 ten-crop features
(``build_karpathy``), or by generating the embedded world (``build_synthetic``). A build
writes shard by shard and the manifest last, resumes where an interrupted one stopped, and
does nothing on a finished store."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from storage._errors import StoreError, os_reason
from storage._extractors import FeatureExtractor
from storage._fs import Location
from storage._schema import Manifest
from storage._writer import StoreWriter
from storage.karpathy import check_every_split, ingest, read_karpathy_json

__all__ = [
    "MAX_SCENES",
    "MAX_WORKERS",
    "MIN_SCENES",
    "build_karpathy",
    "build_synthetic",
]

WORLD_DIR = "world"  # where the embedded world's source files live inside its store
MIN_SCENES = 10  # the smallest world whose 80/10/10 split leaves every split an image
MAX_SCENES = 1_000_000  # eight times COCO; the world's JSON alone is ~1.3 GB at this size
MAX_WORKERS = 256  # image decoding processes
MAX_SEED = 2**63 - 1  # the scene projection's random generators take a signed 64-bit seed


def build_karpathy(
    json_path: str | os.PathLike[str],
    images: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    dataset: str | None = None,
    weights: str | None = None,
    device: str | None = None,
    batch_size: int = 32,
    workers: int = 2,
    shard_size: int = 1024,
    dtype: str = "float32",
    feature_compression: str = "none",
    skip_unreadable: bool = False,
) -> Manifest:
    """Build a store from a Karpathy JSON with ResNet-152 ten-crop features. Every input
    is checked before torch is imported and the model built (seconds, and its weights
    read): the sizes, the JSON and its splits, the images folder and ``out``."""
    _check_sizes(shard_size=shard_size, batch_size=batch_size, workers=workers)
    source = read_karpathy_json(json_path, dataset)
    images_dir = Path(images)
    if not images_dir.is_dir():
        raise StoreError(f"--images {images}: not a directory")
    check_every_split(source)  # before anything is written, so a fixed JSON can be rerun
    location = Location.parse(out)
    location.file_type("")  # an unreachable location fails here (the writer looks again)
    from storage.features import ResNetExtractor  # torch is only needed for this path

    extractor = ResNetExtractor(weights, device=device, batch_size=batch_size, num_workers=workers)
    fingerprint = {
        "source": "karpathy",
        "dataset": source.name,
        "json_sha256": source.sha256,
        "images": str(images_dir.resolve()),
        "shard_size": shard_size,
        "skip_unreadable": skip_unreadable,
    }
    # A later run may add or drop --skip-unreadable (its advice after an unreadable
    # image): shards written without it hold only readable images, so both agree.
    writer = _writer(
        location, fingerprint, extractor, dtype, feature_compression, resumable=("skip_unreadable",)
    )
    return ingest(
        source,
        images_dir,
        extractor,
        writer,
        shard_size=shard_size,
        skip_unreadable=skip_unreadable,
    )


def build_synthetic(
    out: str | os.PathLike[str],
    *,
    images: int = 2000,
    seed: int = 0,
    val_images: int | None = None,
    test_images: int | None = None,
    features: str = "scene",
    weights: str | None = None,
    device: str | None = None,
    batch_size: int = 32,
    workers: int = 2,
    shard_size: int = 1024,
    dtype: str = "float32",
    feature_compression: str = "none",
) -> Manifest:
    """Generate the embedded world inside ``out/world`` and ingest it through the same
    Karpathy path as real data; ``val_images`` and ``test_images`` size those splits
    (10% of ``images`` each by default)."""
    from storage.synthetic import GENERATOR_VERSION, generate_world, split_sizes

    _check_sizes(shard_size=shard_size, batch_size=batch_size, workers=workers)
    _check_world(images, seed)
    splits = _check_splits(images, val_images, test_images)
    location = Location.parse(out)
    if not location.is_local:
        raise StoreError(
            f"--out {out}: the embedded world is generated on local disk; give a "
            "local directory (copy the finished store to shared storage afterwards)"
        )
    extractor = _world_extractor(features, seed, weights, device, batch_size, workers)
    fingerprint: dict[str, Any] = {
        "source": "synthetic",
        "generator": GENERATOR_VERSION,  # another generator's world is another store
        "images": images,
        "seed": seed,
        "shard_size": shard_size,
    }
    if splits != split_sizes(images):  # the default's fingerprint is unchanged
        fingerprint["splits"] = splits
    writer = _writer(location, fingerprint, extractor, dtype, feature_compression)
    if writer.manifest is not None:
        return writer.manifest
    world_dir = Path(location.root) / WORLD_DIR
    try:
        world = generate_world(
            world_dir, n_images=images, seed=seed, val_images=val_images, test_images=test_images
        )
    except OSError as err:
        where = err.filename or world_dir
        raise StoreError(f"{where}: cannot write the embedded world ({os_reason(err)})") from None
    source = read_karpathy_json(world.dataset_json)
    extras = {"world": WORLD_DIR, "senteval": f"{WORLD_DIR}/senteval"}
    return ingest(source, world.images, extractor, writer, shard_size=shard_size, extras=extras)


def _world_extractor(
    features: str, seed: int, weights: str | None, device: str | None, batch_size: int, workers: int
) -> FeatureExtractor:
    """The embedded world's feature extractor: its scene projection or ResNet-152."""
    if features == "scene":
        from storage.synthetic import SceneProjectionExtractor

        return SceneProjectionExtractor(seed=seed)
    if features == "resnet":
        from storage.features import ResNetExtractor

        return ResNetExtractor(weights, device=device, batch_size=batch_size, num_workers=workers)
    raise StoreError(f"--features: expected 'scene' or 'resnet', got {features!r}")


def _check_sizes(*, shard_size: int, batch_size: int, workers: int) -> None:
    """Refuse sizes no build can use, naming the option."""
    for flag, value, low in (
        ("--shard-size", shard_size, 1),
        ("--batch-size", batch_size, 1),
        ("--workers", workers, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise StoreError(f"{flag}: expected an integer of at least {low}, got {value!r}")
    if workers > MAX_WORKERS:  # each is a process: a typo must not fork thousands
        raise StoreError(f"--workers: expected at most {MAX_WORKERS} processes, got {workers}")


def _check_world(images: int, seed: int) -> None:
    """Refuse a world size or seed the generator cannot use, naming the option."""
    for flag, value, low, high in (
        ("--images", images, MIN_SCENES, MAX_SCENES),
        ("--seed", seed, 0, MAX_SEED),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise StoreError(f"{flag}: expected an integer from {low} to {high}, got {value!r}")


def _check_splits(images: int, val_images: int | None, test_images: int | None) -> dict[str, int]:
    """The world's split sizes; a size that leaves a split empty is refused, naming the
    option."""
    from storage.synthetic import split_sizes

    for flag, value in (("--val-images", val_images), ("--test-images", test_images)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < images
        ):
            raise StoreError(f"{flag}: expected an integer from 1 to {images - 1}, got {value!r}")
    try:
        return split_sizes(images, val_images, test_images)
    except ValueError as err:
        raise StoreError(f"--val-images, --test-images with --images {images}: {err}") from None


def _writer(
    out: Location,
    fingerprint: dict[str, Any],
    extractor: FeatureExtractor,
    dtype: str,
    feature_compression: str,
    resumable: tuple[str, ...] = (),
) -> StoreWriter:
    """The store writer of a build: its settings are part of the build's fingerprint."""
    fingerprint = {
        **fingerprint,
        "extractor": extractor.describe(),
        "dtype": dtype,
        "feature_compression": feature_compression,
    }
    return StoreWriter(
        out,
        fingerprint=fingerprint,
        feature_dim=extractor.dim,
        feature_dtype=dtype,
        feature_compression=feature_compression,
        resumable=resumable,
    )
