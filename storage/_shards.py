"""One shard pair as bytes: encoding the image and caption tables a build writes, and
reading back the record of a pair an earlier, interrupted run of the build left."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from storage._errors import StoreError, os_reason
from storage._json import parse_json
from storage._schema import CAPTION_SCHEMA, CAPTIONS_PER_IMAGE, ShardInfo, image_schema

__all__ = [
    "ShardRecord",
    "caption_table",
    "check_shapes",
    "encode_images",
    "found_record",
    "parquet_bytes",
    "sha256",
]


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
