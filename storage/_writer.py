"""Writing a feature store shard by shard, resumably, with the manifest last."""

from __future__ import annotations

import json
import logging
import os
import posixpath
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from storage._captions import check_caption_lengths
from storage._errors import StoreError
from storage._fs import Location
from storage._json import parse_json
from storage._paths import is_temp_name
from storage._schema import (
    BUILD_STATE,
    FEATURE_COMPRESSIONS,
    FEATURE_DTYPES,
    MANIFEST,
    Manifest,
    ShardInfo,
    SplitInfo,
    shard_name,
)
from storage._shards import (
    ShardRecord,
    caption_table,
    check_shapes,
    encode_images,
    found_record,
    parquet_bytes,
    sha256,
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
