"""Writing a feature store shard by shard, resumably, with the manifest last."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from storage._errors import StoreError
from storage._fs import Location
from storage._paths import is_temp_name
from storage._schema import (
    BUILD_STATE,
    CAPTION_SCHEMA,
    CAPTIONS_PER_IMAGE,
    FEATURE_COMPRESSIONS,
    FEATURE_DTYPES,
    MANIFEST,
    Manifest,
    ShardInfo,
    SplitInfo,
    image_schema,
    shard_name,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardRecord:
    """One written (or found) pair of image and caption shards."""

    images: ShardInfo
    captions: ShardInfo
    skipped_images: tuple[str, ...]
    truncated_images: int


class StoreWriter:
    """Writes a store at ``out`` for one build, identified by ``fingerprint``.

    Opening checks what ``out`` already holds: nothing (a new build), the same
    build unfinished (resume: finished shards are kept), the same build complete
    (:attr:`complete` is true and :attr:`manifest` holds it), or anything else,
    which is refused so that no existing data is overwritten.
    """

    def __init__(
        self,
        out: str | os.PathLike[str],
        *,
        fingerprint: dict[str, Any],
        feature_dim: int,
        feature_dtype: str = "float32",
        feature_compression: str = "none",
    ) -> None:
        if feature_dtype not in FEATURE_DTYPES:
            raise StoreError(
                f"feature dtype: expected one of {FEATURE_DTYPES}, got {feature_dtype!r}"
            )
        if feature_compression not in FEATURE_COMPRESSIONS:
            raise StoreError(
                f"feature compression: expected one of {FEATURE_COMPRESSIONS}, "
                f"got {feature_compression!r}"
            )
        self.location = Location.parse(out)
        self.fingerprint = json.loads(json.dumps(fingerprint))  # normalised as stored
        self.feature_dim = feature_dim
        self.feature_dtype = feature_dtype
        self.feature_compression = feature_compression
        self.manifest: Manifest | None = None
        self._claim()

    @property
    def complete(self) -> bool:
        return self.manifest is not None

    def _claim(self) -> None:
        loc = self.location
        if loc.exists(MANIFEST):
            existing = Manifest.from_json(loc.read_bytes(MANIFEST).decode(), loc.display(MANIFEST))
            if existing.build != self.fingerprint:
                raise self._different_store(existing.build)
            self.manifest = existing
            loc.delete(BUILD_STATE)  # a kill between the manifest and this file's removal
            return
        if loc.exists(BUILD_STATE):
            state = json.loads(loc.read_bytes(BUILD_STATE))
            if state != self.fingerprint:
                raise self._different_store(state)
            logger.info("resuming the unfinished build in %s", loc.uri)
            self._remove_interrupted_writes()
            return
        info = loc.fs.get_file_info(loc.root)
        if info.type != pa.fs.FileType.NotFound and loc.list_files("") + _subdirs(loc):
            raise StoreError(
                f"{loc.uri}: the directory is not empty and holds no store; "
                "choose an empty or new --out directory"
            )
        loc.write_bytes(BUILD_STATE, (json.dumps(self.fingerprint, indent=2) + "\n").encode())

    def _remove_interrupted_writes(self) -> None:
        """Delete the temporary files of writes a killed build left behind; shards are
        moved into place whole, so every finished one is kept. Like the rest of a
        resume, this assumes one build at a time per store."""
        loc = self.location
        for folder in ("", "images", "captions"):
            for name in loc.list_files(folder):
                if is_temp_name(posixpath.basename(name)):
                    logger.info("removing %s, left by an interrupted build", loc.display(name))
                    loc.delete(name)

    def _different_store(self, other: dict[str, Any]) -> StoreError:
        changed = sorted(
            k for k in set(other) | set(self.fingerprint) if other.get(k) != self.fingerprint.get(k)
        )
        return StoreError(
            f"{self.location.uri}: already holds a different store (it differs in "
            f"{', '.join(changed)}); choose another --out or delete that directory first"
        )

    def existing_shard(self, split: str, index: int) -> ShardRecord | None:
        """The record of shard ``index`` of ``split`` if an earlier run finished it."""
        loc = self.location
        names = shard_name("images", split, index), shard_name("captions", split, index)
        if not all(loc.exists(name) for name in names):
            return None
        image_bytes, caption_bytes = (loc.read_bytes(name) for name in names)
        image_meta = pq.ParquetFile(io.BytesIO(image_bytes)).metadata
        caption_rows = pq.ParquetFile(io.BytesIO(caption_bytes)).metadata.num_rows
        extra = {k.decode(): v.decode() for k, v in (image_meta.metadata or {}).items()}
        return ShardRecord(
            ShardInfo(names[0], image_meta.num_rows, _sha256(image_bytes)),
            ShardInfo(names[1], caption_rows, _sha256(caption_bytes)),
            tuple(json.loads(extra.get("skipped_images", "[]"))),
            int(extra.get("truncated_images", "0")),
        )

    def write_shard(
        self,
        split: str,
        index: int,
        image_ids: Sequence[str],
        features: np.ndarray,
        captions: Sequence[Sequence[str]],
        *,
        skipped_images: Sequence[str] = (),
        truncated_images: int = 0,
    ) -> ShardRecord:
        """Write the caption shard, then the image shard, each atomically."""
        where = f"shard {split}-{index}"
        self._check_shard_shapes(where, len(image_ids), features, captions)
        caption_table = _caption_table(image_ids, captions)
        image_table = self._image_table(
            where, image_ids, features, skipped_images, truncated_images
        )
        captions_info = self._write_table(
            shard_name("captions", split, index), caption_table, compression="zstd"
        )
        images_info = self._write_table(
            shard_name("images", split, index),
            image_table,
            compression={"image_id": "zstd", "feature": self.feature_compression},
        )
        return ShardRecord(images_info, captions_info, tuple(skipped_images), truncated_images)

    def _check_shard_shapes(
        self, where: str, n: int, features: np.ndarray, captions: Sequence[Sequence[str]]
    ) -> None:
        """Refuse features that are not ``(n, feature_dim)`` or captions not five per image."""
        if features.shape != (n, self.feature_dim):
            raise StoreError(
                f"{where}: features of shape {features.shape}, expected ({n}, {self.feature_dim})"
            )
        if any(len(c) != CAPTIONS_PER_IMAGE for c in captions) or len(captions) != n:
            raise StoreError(
                f"{where}: expected {CAPTIONS_PER_IMAGE} captions for each of {n} images"
            )

    def _image_table(
        self,
        where: str,
        image_ids: Sequence[str],
        features: np.ndarray,
        skipped_images: Sequence[str],
        truncated_images: int,
    ) -> pa.Table:
        """The image shard's table: ids and features stored as fixed-size binary, with the
        shard's skipped and truncated images in the schema's metadata."""
        schema = image_schema(self.feature_dim, self.feature_dtype)
        schema = schema.with_metadata(
            {
                **schema.metadata,
                b"skipped_images": json.dumps(list(skipped_images)),
                b"truncated_images": str(truncated_images),
            }
        )
        raw = self._stored_features(where, image_ids, features)
        feature_column = pa.FixedSizeBinaryArray.from_buffers(
            schema.field("feature").type, len(image_ids), [None, pa.py_buffer(raw)]
        )
        return pa.table(
            {"image_id": pa.array(list(image_ids), pa.string()), "feature": feature_column},
            schema=schema,
        )

    def _stored_features(
        self, where: str, image_ids: Sequence[str], features: np.ndarray
    ) -> np.ndarray:
        """The features as stored (contiguous, in the store's dtype), which must be finite."""
        with np.errstate(over="ignore"):
            raw = np.ascontiguousarray(features, dtype=self.feature_dtype)
        if not np.isfinite(raw).all():
            bad = image_ids[int(np.flatnonzero(~np.isfinite(raw).all(axis=1))[0])]
            raise StoreError(
                f"{where}: the features of image {bad!r} are not finite as {self.feature_dtype}"
                + (
                    " (beyond float16's range: build with --dtype float32)"
                    if self.feature_dtype == "float16"
                    else ""
                )
            )
        return raw

    def _write_table(self, name: str, table: pa.Table, compression: Any) -> ShardInfo:
        sink = pa.BufferOutputStream()
        pq.write_table(
            table,
            sink,
            compression=compression,
            use_dictionary=False,
            row_group_size=max(len(table), 1),
            write_statistics=False,
        )
        data = sink.getvalue().to_pybytes()
        self.location.write_bytes(name, data)
        return ShardInfo(name, len(table), _sha256(data))

    def finish(
        self,
        *,
        dataset: str,
        feature_extractor: dict[str, Any],
        splits: dict[str, list[ShardRecord]],
        extras: dict[str, Any] | None = None,
    ) -> Manifest:
        """Write the manifest (last), which marks the store complete."""
        manifest = Manifest(
            dataset=dataset,
            feature_extractor=feature_extractor,
            feature_dim=self.feature_dim,
            feature_dtype=self.feature_dtype,
            splits={name: _split_info(records) for name, records in splits.items()},
            build=self.fingerprint,
            extras=extras or {},
        )
        self.location.write_bytes(MANIFEST, manifest.to_json().encode())
        self.location.delete(BUILD_STATE)
        self.manifest = manifest
        return manifest


def _caption_table(image_ids: Sequence[str], captions: Sequence[Sequence[str]]) -> pa.Table:
    """The caption shard's table: a row per caption, each image's five in order."""
    n = len(image_ids)
    return pa.table(
        {
            "image_id": pa.array(
                np.repeat(np.asarray(image_ids, dtype=object), CAPTIONS_PER_IMAGE), pa.string()
            ),
            "caption_index": pa.array(np.tile(np.arange(CAPTIONS_PER_IMAGE, dtype=np.int8), n)),
            "caption": pa.array([c for five in captions for c in five], pa.string()),
        },
        schema=CAPTION_SCHEMA,
    )


def _split_info(records: list[ShardRecord]) -> SplitInfo:
    return SplitInfo(
        images=sum(r.images.rows for r in records),
        captions=sum(r.captions.rows for r in records),
        image_shards=tuple(r.images for r in records),
        caption_shards=tuple(r.captions for r in records),
        skipped_images=tuple(s for r in records for s in r.skipped_images),
        truncated_images=sum(r.truncated_images for r in records),
    )


def _subdirs(loc: Location) -> list[str]:
    selector = pa.fs.FileSelector(loc.root, allow_not_found=True)
    return [i.path for i in loc.fs.get_file_info(selector) if i.type == pa.fs.FileType.Directory]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
