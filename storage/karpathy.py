"""Karpathy's split files (``dataset_{flickr8k,flickr30k,coco}.json``) and their ingestion.

The JSON holds ``{"dataset": name, "images": [{"filename", "filepath" (COCO only),
"split": "train"|"val"|"test"|"restval", "sentences": [{"raw", "tokens", ...}, ...]}]}``.
Rules (docs/protocols.md section 4): ``restval`` joins ``train``; Flickr captions are ``raw`` as is;
COCO captions are the ``tokens`` joined with single spaces plus ``" ."``; exactly five
captions per image (COCO images with more keep their first five, and are counted).
``filename`` and ``filepath`` must be '/'-separated paths inside the ``--images``
directory (no ``..``, not absolute: see ``storage._paths``); others are refused when
the JSON is read, naming the entry. :func:`ingest` extracts the features of every image,
shard by shard, into a store.

A store needs images in every split, so a data set with an empty split is refused before
anything is written, and so is a build that leaves a split empty because none of its
images could be read (``--skip-unreadable``); the shards of such a split hold nothing
and are removed, so that a run after the images are fixed reads them again.

Example::

    >>> dataset = read_karpathy_json("dataset_flickr8k.json")     # doctest: +SKIP
    >>> len(dataset.images["train"])                              # doctest: +SKIP
    6000
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from storage._captions import check_caption_lengths
from storage._errors import StoreError, describe
from storage._extractors import FeatureExtractor, ImageItem
from storage._files import read_regular
from storage._json import parse_json
from storage._paths import path_problem
from storage._schema import CAPTIONS_PER_IMAGE, SPLITS, Manifest, SplitInfo
from storage._writer import ShardRecord, StoreWriter

__all__ = [
    "KNOWN_DATASETS",
    "KarpathyDataset",
    "KarpathyImage",
    "check_every_split",
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


def read_karpathy_json(path: str | os.PathLike[str], dataset: str | None = None) -> KarpathyDataset:
    """Read and validate a Karpathy split file; ``dataset`` overrides the name in the file."""
    path = Path(path)
    data = read_regular(path, "the Karpathy JSON")
    raw = parse_json(data, str(path))
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


def check_every_split(dataset: KarpathyDataset) -> None:
    """Refuse a data set with no image in one of the store's splits: training needs
    ``train``, selection ``val`` and reporting ``test``, so a store missing one would
    only fail later, further from the cause; or with a caption longer than training
    takes (``storage._captions``)."""
    for split in SPLITS:
        if not dataset.images.get(split):
            sources = " or ".join(repr(s) for s, target in _SPLIT_OF.items() if target == split)
            raise StoreError(
                f"{describe(dataset.path, 'images')}: no image in split {split!r} (none has "
                f"'split': {sources}); a store needs at least one image in each of "
                f"{', '.join(SPLITS)}"
            )
        images = dataset.images[split]
        check_caption_lengths(
            str(dataset.path), split, [i.image_id for i in images], [i.captions for i in images]
        )


@dataclass(frozen=True)
class _Run:
    """What every shard of one ingestion shares."""

    writer: StoreWriter
    images_root: Path
    extractor: FeatureExtractor
    shard_size: int
    skip_unreadable: bool


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
    check_every_split(dataset)
    if writer.manifest is not None:
        _check_complete_store(writer, skip_unreadable)
        logger.info("%s is already complete; nothing to do", writer.location.uri)
        return writer.manifest
    run = _Run(writer, Path(images_dir), extractor, shard_size, skip_unreadable)
    records = {split: _ingest_split(run, dataset, split) for split in SPLITS}
    return writer.finish(
        dataset=dataset.name, feature_extractor=extractor.describe(), splits=records, extras=extras
    )


def _ingest_split(run: _Run, dataset: KarpathyDataset, split: str) -> list[ShardRecord]:
    """Write (or find) every shard of ``split``; refuse a split that ends up empty."""
    images = dataset.images[split]
    starts = range(0, len(images), run.shard_size)
    records = []
    for index, start in enumerate(starts):
        record = run.writer.existing_shard(split, index)
        if record is None:
            chunk = images[start : start + run.shard_size]
            record = _write_shard(run, split, index, chunk)
        else:
            _check_found_shard(run, record)
            logger.info("%s shard %d/%d: already written", split, index + 1, len(starts))
        records.append(record)
    if not any(record.images.rows for record in records):
        # Its shards hold nothing but the list of unreadable images: remove them, so
        # that a run after the images are fixed reads them again instead of keeping them.
        for index in range(len(records)):
            run.writer.remove_shard(split, index)
        first = run.images_root / images[0].relpath
        raise StoreError(
            f"{describe(dataset.path, 'images')}: split {split!r} would be empty: none of "
            f"its {len(images)} images could be read (the first is {first}); fix them and "
            "run the same command again"
        )
    return records


def _check_found_shard(run: _Run, record: ShardRecord) -> None:
    """A shard an earlier run wrote with ``--skip-unreadable`` left images out: without
    the flag now, keeping it would break the promise that no image is left out."""
    if record.skipped_images and not run.skip_unreadable:
        loc = run.writer.location
        raise StoreError(
            f"{loc.display(record.images.path)}: an earlier run of this build wrote it with "
            f"--skip-unreadable, leaving out {len(record.skipped_images)} unreadable images "
            f"(the first is {record.skipped_images[0]!r}); pass --skip-unreadable to keep it, "
            f"or delete it and {loc.display(record.captions.path)} to read them again"
        )


def _check_complete_store(writer: StoreWriter, skip_unreadable: bool) -> None:
    """A complete store that left images out is not what a run without
    ``--skip-unreadable`` asks for (one that left none out is, with or without it)."""
    assert writer.manifest is not None
    splits: dict[str, SplitInfo] = writer.manifest.splits
    skipped = [image for info in splits.values() for image in info.skipped_images]
    if skipped and not skip_unreadable:
        raise StoreError(
            f"{writer.location.uri}: already complete, built with --skip-unreadable: it "
            f"leaves out {len(skipped)} unreadable images (the first is {skipped[0]!r}); pass "
            "--skip-unreadable to accept it as it is, or build into another --out"
        )


def _write_shard(run: _Run, split: str, index: int, chunk: Sequence[KarpathyImage]) -> ShardRecord:
    """Extract ``chunk`` and write it as shard ``index`` of ``split``; an image that cannot
    be read stops the build, naming it, unless ``--skip-unreadable`` leaves it out."""
    images_root, extractor, writer = run.images_root, run.extractor, run.writer
    started = time.perf_counter()
    items = [
        ImageItem(img.image_id, resolve_image_path(images_root, img.relpath), img.entry)
        for img in chunk
    ]
    features, errors = extractor.extract(items)
    failed = [(img, err) for img, err in zip(chunk, errors, strict=True) if err is not None]
    if failed and not run.skip_unreadable:
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
