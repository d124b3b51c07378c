"""Karpathy's split files (``dataset_{flickr8k,flickr30k,coco}.json``) and their ingestion.

The JSON holds ``{"dataset": name, "images": [{"filename", "filepath" (COCO only),
"split": "train"|"val"|"test"|"restval", "sentences": [{"raw", "tokens", ...}, ...]}]}``;
``storage._karpathy_json`` reads it as docs/protocols.md section 4 says. :func:`ingest` extracts the
features of every image, shard by shard, into a store.

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

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from storage._errors import StoreError, describe
from storage._extractors import FeatureExtractor, ImageItem
from storage._karpathy_json import (
    KNOWN_DATASETS,
    KarpathyDataset,
    KarpathyImage,
    check_every_split,
    read_karpathy_json,
    resolve_image_path,
)
from storage._schema import SPLITS, Manifest, SplitInfo
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
