"""Writing a feature store shard by shard, resumably, with the manifest last: each shard
pair encoded as bytes, and the record of a pair an earlier, interrupted run of the build
left read back."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import posixpath
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from storage._captions import check_caption_lengths
from storage._errors import StoreError, os_reason
from storage._fs import Location
from storage._json import parse_json
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

__all__ = ["ShardRecord", "StoreWriter"]

logger = logging.getLogger(__name__)


class StoreWriter:
    """Writes a store at ``out`` for one build, identified by ``fingerprint``.

    Opening checks what ``out`` already holds: nothing (a new build), the same
    build unfinished (resume: finished shards are kept), the same build complete
    (:attr:`manifest` holds it, else it is None), or anything else, which is refused
    so that no existing data is overwritten.
    """

    def __init__(
        self,
        out: str | os.PathLike[str] | Location,
        *,
        fingerprint: dict[str, Any],
        feature_dim: int,
        feature_dtype: str = "float32",
        feature_compression: str = "none",
        resumable: Collection[str] = (),
    ) -> None:
        """``resumable`` names the fingerprint keys that a later run of the same build
        may change (``skip_unreadable``): they change no finished shard's content."""
        if feature_dtype not in FEATURE_DTYPES:
            raise StoreError(
                f"feature dtype: expected one of {FEATURE_DTYPES}, got {feature_dtype!r}"
            )
        if feature_compression not in FEATURE_COMPRESSIONS:
            raise StoreError(
                f"feature compression: expected one of {FEATURE_COMPRESSIONS}, "
                f"got {feature_compression!r}"
            )
        self.location = out if isinstance(out, Location) else Location.parse(out)
        self.fingerprint = json.loads(json.dumps(fingerprint))  # normalised as stored
        self.resumable = frozenset(resumable)
        self.feature_dim = feature_dim
        self.feature_dtype = feature_dtype
        self.feature_compression = feature_compression
        self.manifest: Manifest | None = None
        self._claim()

    def _claim(self) -> None:
        loc = self.location
        kind = loc.file_type("")
        if kind not in (pafs.FileType.Directory, pafs.FileType.NotFound):
            raise StoreError(
                f"{loc.uri}: is a file, not a directory; --out expects a new or empty "
                "directory, or a store this build started"
            )
        if loc.exists(MANIFEST):
            existing = Manifest.from_json(loc.read_bytes(MANIFEST), loc.display(MANIFEST))
            if self._changed(existing.build):
                raise self._different_store(existing.build)
            self.manifest = existing
            loc.delete(BUILD_STATE)  # a kill between the manifest and this file's removal
            return
        if loc.exists(BUILD_STATE):
            self._resume(loc)
            return
        if kind != pafs.FileType.NotFound and loc.list_entries(""):
            raise StoreError(
                f"{loc.uri}: the directory is not empty and holds no store; "
                "choose an empty or new --out directory"
            )
        self._write_state()

    def _resume(self, loc: Location) -> None:
        """Take over the unfinished build recorded in ``build.json``, if it is this one."""
        where = loc.display(BUILD_STATE)
        state = parse_json(loc.read_bytes(BUILD_STATE), where)
        if not isinstance(state, dict):
            raise StoreError(
                f"{where}: expected a JSON object (the settings of an unfinished build), got "
                f"{type(state).__name__}; delete {loc.uri} if it holds nothing you need"
            )
        if self._changed(state):
            raise self._different_store(state)
        logger.info("resuming the unfinished build in %s", loc.uri)
        if state != self.fingerprint:  # only resumable settings differ
            for key in sorted(self.resumable):
                logger.info("%s: %r before, %r now", key, state.get(key), self.fingerprint.get(key))
            self._write_state()
        self._remove_interrupted_writes()

    def _write_state(self) -> None:
        text = json.dumps(self.fingerprint, indent=2) + "\n"
        self.location.write_bytes(BUILD_STATE, text.encode())

    def _changed(self, other: dict[str, Any]) -> list[str]:
        """The fingerprint keys whose values differ from ``other``'s, but for those a
        later run may change."""
        keys = (set(other) | set(self.fingerprint)) - self.resumable
        return sorted(k for k in keys if other.get(k) != self.fingerprint.get(k))

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
        return StoreError(
            f"{self.location.uri}: already holds a different store (it differs in "
            f"{', '.join(self._changed(other))}); choose another --out or delete that "
            "directory first"
        )

    def existing_shard(self, split: str, index: int) -> ShardRecord | None:
        """The record of shard ``index`` of ``split`` if an earlier run finished it."""
        loc = self.location
        names = shard_name("images", split, index), shard_name("captions", split, index)
        if not all(loc.exists(name) for name in names):
            return None
        image_bytes, caption_bytes = (loc.read_bytes(name) for name in names)
        return found_record(names, image_bytes, caption_bytes, loc.display)

    def remove_shard(self, split: str, index: int) -> None:
        """Delete shard ``index`` of ``split`` (the image shard first: without it the pair
        counts as not written), so that the next run writes it again."""
        for kind in ("images", "captions"):
            self.location.delete(shard_name(kind, split, index))

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
        dim, dtype = self.feature_dim, self.feature_dtype
        check_shapes(where, dim, len(image_ids), features, captions)
        check_caption_lengths(where, split, image_ids, captions)  # before anything is written
        image_table = encode_images(
            where, dim, dtype, image_ids, features, skipped_images, truncated_images
        )
        captions_info = self._write_table(
            shard_name("captions", split, index), caption_table(image_ids, captions), "zstd"
        )
        images_info = self._write_table(
            shard_name("images", split, index),
            image_table,
            {"image_id": "zstd", "feature": self.feature_compression},
        )
        return ShardRecord(images_info, captions_info, tuple(skipped_images), truncated_images)

    def _write_table(self, name: str, table: pa.Table, compression: Any) -> ShardInfo:
        data = parquet_bytes(table, compression)
        self.location.write_bytes(name, data)
        return ShardInfo(name, len(table), sha256(data))

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


def _split_info(records: list[ShardRecord]) -> SplitInfo:
    return SplitInfo(
        images=sum(r.images.rows for r in records),
        captions=sum(r.captions.rows for r in records),
        image_shards=tuple(r.images for r in records),
        caption_shards=tuple(r.captions for r in records),
        skipped_images=tuple(s for r in records for s in r.skipped_images),
        truncated_images=sum(r.truncated_images for r in records),
    )


# -- one shard pair as bytes ------------------------------------------------------------


@dataclass(frozen=True)
class ShardRecord:
    """One written (or found) pair of image and caption shards."""

    images: ShardInfo
    captions: ShardInfo
    skipped_images: tuple[str, ...]
    truncated_images: int


def check_shapes(
    where: str, dim: int, n: int, features: np.ndarray, captions: Sequence[Sequence[str]]
) -> None:
    """Refuse features that are not ``(n, dim)`` or captions not five per image."""
    if features.shape != (n, dim):
        raise StoreError(f"{where}: features of shape {features.shape}, expected ({n}, {dim})")
    if any(len(c) != CAPTIONS_PER_IMAGE for c in captions) or len(captions) != n:
        raise StoreError(f"{where}: expected {CAPTIONS_PER_IMAGE} captions for each of {n} images")


def encode_images(
    where: str,
    dim: int,
    dtype: str,
    image_ids: Sequence[str],
    features: np.ndarray,
    skipped_images: Sequence[str],
    truncated_images: int,
) -> pa.Table:
    """The image shard's table: ids and features stored as fixed-size binary, with the
    shard's skipped and truncated images in the schema's metadata."""
    schema = image_schema(dim, dtype)
    schema = schema.with_metadata(
        {
            **schema.metadata,
            b"skipped_images": json.dumps(list(skipped_images)),
            b"truncated_images": str(truncated_images),
        }
    )
    raw = _stored_features(where, dtype, image_ids, features)
    feature_column = pa.FixedSizeBinaryArray.from_buffers(
        schema.field("feature").type, len(image_ids), [None, pa.py_buffer(raw)]
    )
    return pa.table(
        {"image_id": pa.array(list(image_ids), pa.string()), "feature": feature_column},
        schema=schema,
    )


def _stored_features(
    where: str, dtype: str, image_ids: Sequence[str], features: np.ndarray
) -> np.ndarray:
    """The features as stored (contiguous, in the store's dtype), which must be finite."""
    with np.errstate(over="ignore"):
        raw = np.ascontiguousarray(features, dtype=dtype)
    if not np.isfinite(raw).all():
        bad = image_ids[int(np.flatnonzero(~np.isfinite(raw).all(axis=1))[0])]
        raise StoreError(
            f"{where}: the features of image {bad!r} are not finite as {dtype}"
            + (
                " (beyond float16's range: build with --dtype float32)"
                if dtype == "float16"
                else ""
            )
        )
    return raw


def caption_table(image_ids: Sequence[str], captions: Sequence[Sequence[str]]) -> pa.Table:
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


def parquet_bytes(table: pa.Table, compression: Any) -> bytes:
    """``table`` as one Parquet file: one row group, no dictionaries, no statistics."""
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        compression=compression,
        use_dictionary=False,
        row_group_size=max(len(table), 1),
        write_statistics=False,
    )
    return bytes(sink.getvalue().to_pybytes())


def found_record(
    names: tuple[str, str],
    image_bytes: bytes,
    caption_bytes: bytes,
    display: Callable[[str], str],
) -> ShardRecord:
    """The record of the shard pair ``names`` (image shard, caption shard) that an earlier
    run wrote; a file that is not such a shard is refused, naming it (``display``)."""
    image_rows, extra = _metadata(image_bytes, display(names[0]))
    caption_rows, _ = _metadata(caption_bytes, display(names[1]))
    return ShardRecord(
        ShardInfo(names[0], image_rows, sha256(image_bytes)),
        ShardInfo(names[1], caption_rows, sha256(caption_bytes)),
        *_notes(extra, display(names[0])),
    )


def _metadata(data: bytes, where: str) -> tuple[int, dict[str, str]]:
    """The row count and key-value metadata of a shard an earlier run wrote."""
    try:
        meta = pq.ParquetFile(io.BytesIO(data)).metadata
        extra = {k.decode(): v.decode() for k, v in (meta.metadata or {}).items()}
    except (pa.ArrowException, OSError, UnicodeDecodeError) as err:
        raise _foreign(where, f"is not a readable Parquet file ({os_reason(err)})") from None
    return meta.num_rows, extra


def _notes(extra: dict[str, str], where: str) -> tuple[tuple[str, ...], int]:
    """The skipped image ids and the truncated-image count an image shard records."""
    try:
        skipped = parse_json(extra.get("skipped_images", "[]").encode(), where)
        truncated = int(extra.get("truncated_images", "0"))
    except ValueError as err:  # StoreError included
        raise _foreign(where, f"has bad metadata ({err})") from None
    if not isinstance(skipped, list) or not all(isinstance(i, str) for i in skipped):
        raise _foreign(where, "has bad metadata (skipped_images is not a list of ids)")
    if truncated < 0:
        raise _foreign(where, "has bad metadata (truncated_images is negative)")
    return tuple(skipped), truncated


def _foreign(where: str, problem: str) -> StoreError:
    return StoreError(
        f"{where}: left by an earlier run, but {problem}; delete it to have it written again"
    )


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
