"""Karpathy's split files (``dataset_{flickr8k,flickr30k,coco}.json``) and their ingestion.

The JSON holds ``{"dataset": name, "images": [{"filename", "filepath" (COCO only),
"split": "train"|"val"|"test"|"restval", "sentences": [{"raw", "tokens", ...}, ...]}]}``.
Rules (SPEC section 4): ``restval`` joins ``train``; Flickr captions are ``raw`` as is;
COCO captions are the ``tokens`` joined with single spaces plus ``" ."``; exactly five
captions per image (COCO images with more keep their first five, and are counted).
``filename`` and ``filepath`` must be '/'-separated paths inside the ``--images``
directory (no ``..``, not absolute: see ``storage._paths``); others are refused when
the JSON is read, naming the entry.

Example::

    >>> dataset = read_karpathy_json("dataset_flickr8k.json")     # doctest: +SKIP
    >>> len(dataset.images["train"])                              # doctest: +SKIP
    6000
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from storage._errors import StoreError, describe
from storage._extractors import FeatureExtractor, ImageItem
from storage._paths import path_problem
from storage._schema import CAPTIONS_PER_IMAGE, SPLITS, Manifest
from storage._writer import ShardRecord, StoreWriter

__all__ = [
    "KNOWN_DATASETS",
    "ingest",
    "read_karpathy_json",
    "resolve_image_path",
]

logger = logging.getLogger(__name__)

KNOWN_DATASETS = ("flickr8k", "flickr30k", "coco", "synthetic")
_SPLIT_OF = {"train": "train", "restval": "train", "val": "val", "test": "test"}


@dataclass(frozen=True)
class KarpathyImage:
    image_id: str  # COCO: "filepath/filename"; others: "filename"
    relpath: str  # path of the image file below the --images directory
    captions: tuple[str, ...]  # exactly five
    entry: Mapping[str, Any]  # the raw JSON entry
    truncated: bool  # had more than five captions


@dataclass(frozen=True)
class KarpathyDataset:
    name: str
    path: Path
    sha256: str
    images: dict[str, list[KarpathyImage]]  # split -> images, in JSON order

    @property
    def truncated_images(self) -> int:
        return sum(img.truncated for split in self.images.values() for img in split)


def read_karpathy_json(path: str | os.PathLike[str], dataset: str | None = None) -> KarpathyDataset:
    """Read and validate a Karpathy split file; ``dataset`` overrides the name in the file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise StoreError(f"{path}: cannot read the Karpathy JSON ({err.strerror})") from None
    try:
        raw = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise StoreError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("images"), list):
        raise StoreError(
            f"{describe(path, 'images')}: expected a top-level object with an "
            "'images' list (Karpathy's dataset_*.json format)"
        )
    name = dataset or raw.get("dataset") or _name_from_filename(path)
    if name not in KNOWN_DATASETS:
        raise StoreError(
            f"{describe(path, 'dataset')}: unknown data set {name!r}; expected one of "
            f"{KNOWN_DATASETS} (or pass --dataset)"
        )
    images: dict[str, list[KarpathyImage]] = {split: [] for split in SPLITS}
    seen: set[str] = set()
    for index, entry in enumerate(raw["images"]):
        image = _parse_image(entry, name, path, index)
        if image.image_id in seen:
            raise StoreError(
                f"{describe(path, f'images[{index}].filename')}: image "
                f"{image.image_id!r} is listed twice"
            )
        seen.add(image.image_id)
        images[_SPLIT_OF[entry["split"]]].append(image)
    return KarpathyDataset(name, path, hashlib.sha256(data).hexdigest(), images)


def _name_from_filename(path: Path) -> str | None:
    stem = path.stem
    return stem[len("dataset_") :] if stem.startswith("dataset_") else None


def _parse_image(entry: Any, dataset: str, path: Path, index: int) -> KarpathyImage:
    at = f"images[{index}]"
    if not isinstance(entry, dict):
        raise StoreError(f"{describe(path, at)}: expected an object")
    filename = _image_path_field(entry, "filename", path, at)
    split = _field(entry, "split", str, path, at)
    if split not in _SPLIT_OF:
        raise StoreError(
            f"{describe(path, f'{at}.split')}: expected one of {tuple(_SPLIT_OF)}, got {split!r}"
        )
    relpath = filename
    if dataset == "coco":
        relpath = f"{_image_path_field(entry, 'filepath', path, at)}/{filename}"
    sentences = _field(entry, "sentences", list, path, at)
    captions = [_caption(s, dataset, path, f"{at}.sentences[{k}]") for k, s in enumerate(sentences)]
    if len(captions) < CAPTIONS_PER_IMAGE or (
        len(captions) > CAPTIONS_PER_IMAGE and dataset != "coco"
    ):
        raise StoreError(
            f"{describe(path, f'{at}.sentences')}: image {relpath!r} has "
            f"{len(captions)} captions, expected {CAPTIONS_PER_IMAGE}"
        )
    return KarpathyImage(
        relpath,
        relpath,
        tuple(captions[:CAPTIONS_PER_IMAGE]),
        entry,
        truncated=len(captions) > CAPTIONS_PER_IMAGE,
    )


def _caption(sentence: Any, dataset: str, path: Path, at: str) -> str:
    if not isinstance(sentence, dict):
        raise StoreError(f"{describe(path, at)}: expected an object with 'raw' and 'tokens'")
    if dataset == "coco":
        tokens = _field(sentence, "tokens", list, path, at)
        if not all(isinstance(t, str) for t in tokens):
            raise StoreError(f"{describe(path, f'{at}.tokens')}: expected a list of strings")
        return " ".join(tokens) + " ."
    return str(_field(sentence, "raw", str, path, at))


def _field(obj: dict[str, Any], key: str, kind: type, path: Path, at: str) -> Any:
    if key not in obj:
        raise StoreError(f"{describe(path, f'{at}.{key}')}: missing (expected {kind.__name__})")
    if not isinstance(obj[key], kind):
        raise StoreError(
            f"{describe(path, f'{at}.{key}')}: expected {kind.__name__}, got "
            f"{type(obj[key]).__name__}"
        )
    return obj[key]


def _image_path_field(entry: dict[str, Any], key: str, path: Path, at: str) -> str:
    """``entry[key]`` (``filename`` or ``filepath``): a path inside the images directory."""
    value: str = _field(entry, key, str, path, at)
    problem = path_problem(value)
    if problem is not None:
        raise StoreError(
            f"{describe(path, f'{at}.{key}')}: expected a '/'-separated path inside the "
            f"--images directory, got {value!r}, which {problem}"
        )
    return value


def resolve_image_path(images_dir: Path, relpath: str) -> Path:
    """``images_dir / relpath`` (``images_dir`` made absolute), refusing a ``relpath``
    that would leave ``images_dir``.

    The check is on the text (see ``storage._paths``), not on ``resolve()``: symlinks
    inside ``images_dir`` are followed when the image is opened, since whoever owns the
    directory put them there (e.g. ``train2014`` linked to a shared disk); what the JSON
    cannot do is name a path outside it.
    """
    problem = path_problem(relpath)
    if problem is not None:
        raise StoreError(
            f"image path {relpath!r} escapes the images directory {images_dir}: it {problem} "
            "(expected a '/'-separated path inside it)"
        )
    return images_dir.resolve() / relpath


def ingest(
    dataset: KarpathyDataset,
    images_dir: str | os.PathLike[str],
    extractor: FeatureExtractor,
    writer: StoreWriter,
    *,
    shard_size: int = 1024,
    skip_unreadable: bool = False,
    extras: dict[str, Any] | None = None,
) -> Manifest:
    """Extract features shard by shard into ``writer``, skipping shards an earlier,
    interrupted run finished, then write the manifest."""
    if writer.manifest is not None:
        logger.info("%s is already complete; nothing to do", writer.location.uri)
        return writer.manifest
    images_root = Path(images_dir)
    records: dict[str, list[ShardRecord]] = {}
    for split in SPLITS:
        split_images = dataset.images[split]
        shards = range(0, len(split_images), shard_size)
        records[split] = []
        for index, start in enumerate(shards):
            record = writer.existing_shard(split, index)
            if record is None:
                chunk = split_images[start : start + shard_size]
                record = _write_shard(
                    writer, split, index, chunk, images_root, extractor, skip_unreadable
                )
            else:
                logger.info("%s shard %d/%d: already written", split, index + 1, len(shards))
            records[split].append(record)
    return writer.finish(
        dataset=dataset.name, feature_extractor=extractor.describe(), splits=records, extras=extras
    )


def _write_shard(
    writer: StoreWriter,
    split: str,
    index: int,
    chunk: Sequence[KarpathyImage],
    images_root: Path,
    extractor: FeatureExtractor,
    skip_unreadable: bool,
) -> ShardRecord:
    started = time.perf_counter()
    items = [
        ImageItem(img.image_id, resolve_image_path(images_root, img.relpath), img.entry)
        for img in chunk
    ]
    features, errors = extractor.extract(items)
    failed = [(img, err) for img, err in zip(chunk, errors, strict=True) if err is not None]
    if failed and not skip_unreadable:
        img, err = failed[0]
        raise StoreError(
            f"{images_root / img.relpath}: image listed in the JSON is {err}; fix it "
            f"or pass --skip-unreadable to leave it out ({len(failed)} such images "
            f"in this shard)"
        )
    keep = np.array([err is None for err in errors], dtype=bool)
    kept = [img for img, ok in zip(chunk, keep, strict=True) if ok]
    record = writer.write_shard(
        split,
        index,
        [img.image_id for img in kept],
        features[keep],
        [img.captions for img in kept],
        skipped_images=[img.image_id for img, _ in failed],
        truncated_images=sum(img.truncated for img in kept),
    )
    rate = len(chunk) / max(time.perf_counter() - started, 1e-9)
    logger.info(
        "%s shard %d: %d images (%d skipped), %.0f images/s",
        split,
        index + 1,
        len(kept),
        len(failed),
        rate,
    )
    return record
