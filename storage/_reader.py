"""Reading a feature store: one call per split, as few copies as possible."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from storage._captions import check_caption_lengths
from storage._errors import MissingFileError, StoreError, os_reason
from storage._fs import Location
from storage._schema import (
    BUILD_STATE,
    CAPTION_SCHEMA,
    CAPTIONS_PER_IMAGE,
    MANIFEST,
    Manifest,
    ShardInfo,
    SplitInfo,
    image_schema,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class SplitData:
    """One split in memory: row ``i`` of every array is image ``i``."""

    name: str
    image_ids: np.ndarray  # (N,) object array of str
    features: np.ndarray  # (N, D) C-contiguous, the store's dtype (float32 or float16)
    captions: np.ndarray  # (N, 5) object array of str; caption k of image i at [i, k]

    def __len__(self) -> int:
        return len(self.image_ids)


class FeatureStore:
    """A complete store, opened from a local path or a pyarrow filesystem URI."""

    def __init__(self, location: Location, manifest: Manifest) -> None:
        self.location = location
        self.manifest = manifest

    @classmethod
    def open(cls, where: str | os.PathLike[str]) -> FeatureStore:
        location = Location.parse(where)
        if not location.exists(MANIFEST):
            if location.exists(BUILD_STATE):
                raise StoreError(
                    f"{location.display(MANIFEST)}: missing; the build of this store "
                    "did not finish; run the same `python -m storage.build` again to "
                    "resume it"
                )
            raise StoreError(
                f"{location.display(MANIFEST)}: missing; {location.uri} is not a "
                "feature store (build one with `python -m storage.build`)"
            )
        data = location.read_bytes(MANIFEST)
        return cls(location, Manifest.from_json(data, location.display(MANIFEST)))

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.manifest.splits)

    def read_split(self, split: str, *, verify: bool = False) -> SplitData:
        """Image ids, the feature matrix and the aligned captions of ``split``. With
        ``verify`` every shard's sha256 is checked against the manifest as it is read
        (one read of each file: see ``read_features``)."""
        image_ids, features = self.read_features(split, verify=verify)
        caption_ids, captions = self.read_captions(split, verify=verify)
        expected = np.repeat(image_ids, CAPTIONS_PER_IMAGE)
        if len(caption_ids) != len(expected) or not np.array_equal(caption_ids, expected):
            raise StoreError(
                f"{self.location.uri}: captions of split {split!r} are not aligned "
                f"{CAPTIONS_PER_IMAGE} per image with its image shards"
            )
        return SplitData(split, image_ids, features, captions)

    def read_features(self, split: str, *, verify: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``(image_ids, features)`` of ``split``; shards are decoded in parallel straight
        into one preallocated matrix (a single copy after decompression). With
        ``verify`` each shard is hashed from the same buffer it is decoded from, and a
        mismatch with the manifest's sha256 raises ``StoreError`` naming the shard."""
        info = self._split(split)
        m = self.manifest
        features = self._allocate(split, info.images, m.feature_dim, m.feature_dtype)
        image_ids = np.empty(info.images, dtype=object)
        offsets = np.cumsum([0] + [s.rows for s in info.image_shards])
        schema = image_schema(m.feature_dim, m.feature_dtype)

        def load(k: int) -> None:
            shard = info.image_shards[k]
            table = self._read_table(shard, schema, verify)
            start, stop = offsets[k], offsets[k + 1]
            image_ids[start:stop] = table.column("image_id").to_numpy(zero_copy_only=False)
            view = features[start:stop].reshape(-1)
            row_start = 0
            for chunk in table.column("feature").chunks:
                raw = np.frombuffer(
                    chunk.buffers()[1],
                    dtype=m.feature_dtype,
                    count=len(chunk) * m.feature_dim,
                    offset=chunk.offset * schema.field("feature").type.byte_width,
                )
                view[row_start : row_start + raw.size] = raw
                row_start += raw.size

        self._parallel(load, len(info.image_shards))
        return image_ids, features

    def read_captions(self, split: str, *, verify: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``(image_id per caption, captions as an (N, 5) array)`` of ``split`` (``verify``:
        as in ``read_features``)."""
        info = self._split(split)
        tables: list[pa.Table | None] = [None] * len(info.caption_shards)

        def load(k: int) -> None:
            tables[k] = self._read_table(info.caption_shards[k], CAPTION_SCHEMA, verify)

        self._parallel(load, len(tables))
        table = pa.concat_tables(
            [t for t in tables if t is not None] or [CAPTION_SCHEMA.empty_table()]
        )
        index = table.column("caption_index").to_numpy()
        if not np.array_equal(index, np.tile(np.arange(CAPTIONS_PER_IMAGE), info.images)):
            raise StoreError(
                f"{self.location.uri}: caption_index of split {split!r} is not "
                f"0..{CAPTIONS_PER_IMAGE - 1} for every image"
            )
        captions = table.column("caption").to_numpy(zero_copy_only=False)
        return (
            table.column("image_id").to_numpy(zero_copy_only=False),
            captions.reshape(info.images, CAPTIONS_PER_IMAGE),
        )

    def verify(self) -> int:
        """Check every shard (present, checksum, schema, rows), the caption alignment and
        that no caption is longer than training takes (``MAX_CAPTION_CHARS``); raise
        :class:`StoreError` naming the first bad shard or caption. Returns the shard
        count."""
        count = 0
        for split, info in self.manifest.splits.items():  # counts: checked when parsed
            data = self.read_split(split, verify=True)
            check_caption_lengths(self.location.uri, split, data.image_ids, data.captions)
            count += len(info.image_shards) + len(info.caption_shards)
        return count

    # -- internals -----------------------------------------------------------------

    def _split(self, split: str) -> SplitInfo:
        try:
            return self.manifest.splits[split]
        except KeyError:
            raise StoreError(
                f"{self.location.uri}: no split {split!r}; the store has {', '.join(self.splits)}"
            ) from None

    def _allocate(self, split: str, rows: int, dim: int, dtype: str) -> np.ndarray:
        """The split's feature matrix, before any shard is read: a manifest listing more
        rows than memory holds is refused here, naming it, rather than failing later."""
        try:
            return np.empty((rows, dim), dtype=dtype)
        except (MemoryError, ValueError):
            size = rows * dim * np.dtype(dtype).itemsize
            raise StoreError(
                f"{self.location.display(MANIFEST)}: split {split!r} lists {rows:,} images of "
                f"{dim:,} features ({size:,} bytes), more than this machine can hold"
            ) from None

    def _verified_buffer(self, shard: ShardInfo) -> pa.Buffer:
        """The shard's bytes, checked against the manifest's sha256."""
        data = self.location.read_buffer(shard.path)
        digest = hashlib.sha256(memoryview(data)).hexdigest()
        if digest != shard.sha256:
            raise StoreError(
                f"{self.location.display(shard.path)}: checksum mismatch (manifest sha256 "
                f"{shard.sha256[:16]}..., file {digest[:16]}...); the shard is corrupt or was "
                "replaced (`python -m storage.inspect` checks the whole store; rebuild it)"
            )
        return data

    def _read_table(self, shard: ShardInfo, schema: pa.Schema, verify: bool = False) -> pa.Table:
        path = self.location.path(shard.path)
        try:
            if verify:
                source = pa.BufferReader(self._verified_buffer(shard))
                table = pq.read_table(source, use_threads=False)
            elif self.location.is_local:  # memory-mapped, and only if a regular file
                source = pa.BufferReader(self.location.read_buffer(shard.path))
                table = pq.read_table(source, use_threads=False)
            else:
                table = pq.read_table(path, filesystem=self.location.fs, use_threads=False)
        except (FileNotFoundError, MissingFileError):
            raise StoreError(
                f"{self.location.display(shard.path)}: shard listed in the manifest is missing"
            ) from None
        except (pa.ArrowException, OSError) as err:
            raise StoreError(
                f"{self.location.display(shard.path)}: not a readable Parquet file "
                f"({os_reason(err)})"
            ) from None
        self._check_table(shard, table, schema)
        return table

    def _check_table(self, shard: ShardInfo, table: pa.Table, schema: pa.Schema) -> None:
        where = self.location.display(shard.path)
        for expected in schema:
            if expected.name not in table.schema.names:
                raise StoreError(
                    f"{where}: column {expected.name!r} missing (expected {expected.type})"
                )
            actual = table.schema.field(expected.name).type
            if actual != expected.type:
                hint = (
                    " (a feature dimension or dtype other than the manifest's)"
                    if expected.name == "feature"
                    else ""
                )
                raise StoreError(
                    f"{where}: column {expected.name!r} has type {actual}, "
                    f"expected {expected.type}{hint}"
                )
        if table.num_rows != shard.rows:
            raise StoreError(f"{where}: {table.num_rows} rows, the manifest says {shard.rows}")

    @staticmethod
    def _parallel(fn: Callable[[int], None], count: int) -> None:
        # Two threads per core: decoding a shard waits on page faults as much as on
        # the CPU, so oversubscribing keeps both cores busy (bench/bench_store_read.py).
        workers = max(1, min(count, 2 * (os.cpu_count() or 1)))
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(fn, range(count)))


def open_store(where: str | os.PathLike[str]) -> FeatureStore:
    """Open the store at ``where`` (a local path or a pyarrow filesystem URI)."""
    return FeatureStore.open(where)


def read_split(where: str | os.PathLike[str], split: str, *, verify: bool = False) -> SplitData:
    """Read one split of the store at ``where``: see :meth:`FeatureStore.read_split`."""
    return FeatureStore.open(where).read_split(split, verify=verify)
