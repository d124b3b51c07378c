"""The feature store's on-disk format, defined once.

A store is a directory (local or a pyarrow filesystem URI)::

    manifest.json                  written last; its presence means "complete"
    images/<split>-<k:05d>.parquet image_id: string, feature: fixed_size_binary(dim * itemsize)
    captions/<split>-<k:05d>.parquet image_id: string, caption_index: int8, caption: string

Shard ``k`` of a split holds images ``k * shard_size ...`` of that split in the order of
the source JSON, and its caption shard holds their captions, five per image, in the
same order. The feature column stores each row's vector as raw little-endian bytes
(``float32`` or ``float16``): Parquet has no fixed-size list type, and its list
encoding costs repetition levels on every value, which made reads 6x slower in
``bench/bench_store_read.py``. The dtype and dimension live in the manifest and in the
shard's schema metadata, and readers check both.

Every path in a manifest is checked when it is parsed: shard paths must be exactly
where the writer puts them (``shard_name``), split names plain names and ``extras``
store-relative paths (see ``storage._paths``), so a tampered manifest cannot make a
reader open a file outside its store.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from storage._errors import StoreError, describe
from storage._json import parse_json
from storage._paths import NAME_RULE, name_problem, path_problem

SCHEMA_VERSION = 1
SPLITS = ("train", "val", "test")
CAPTIONS_PER_IMAGE = 5
FEATURE_DTYPES = ("float32", "float16")
FEATURE_COMPRESSIONS = ("none", "lz4", "zstd")
MANIFEST = "manifest.json"
MAX_FEATURE_DIM = 1 << 20  # a feature row is one Parquet fixed-size binary value
MAX_COUNT = (1 << 53) - 1  # rows and image counts: the largest integer JSON readers agree on
BUILD_STATE = "build.json"


def image_schema(dim: int, dtype: str) -> pa.Schema:
    """Schema of an image-feature shard holding ``dim``-dimensional ``dtype`` vectors."""
    width = dim * np.dtype(dtype).itemsize
    return pa.schema(
        [
            pa.field("image_id", pa.string(), nullable=False),
            pa.field("feature", pa.binary(width), nullable=False),
        ],
        metadata={"feature_dim": str(dim), "feature_dtype": dtype},
    )


CAPTION_SCHEMA = pa.schema(
    [
        pa.field("image_id", pa.string(), nullable=False),
        pa.field("caption_index", pa.int8(), nullable=False),
        pa.field("caption", pa.string(), nullable=False),
    ]
)


def shard_name(kind: str, split: str, index: int) -> str:
    """Store-relative path of shard ``index`` of ``split`` (``kind``: images or captions)."""
    return f"{kind}/{split}-{index:05d}.parquet"


@dataclass(frozen=True)
class ShardInfo:
    path: str  # store-relative
    rows: int
    sha256: str


@dataclass(frozen=True)
class SplitInfo:
    images: int
    captions: int
    image_shards: tuple[ShardInfo, ...]
    caption_shards: tuple[ShardInfo, ...]
    # listed in the JSON but missing/unreadable (--skip-unreadable)
    skipped_images: tuple[str, ...] = ()
    truncated_images: int = 0  # images that had more than five captions (first five kept)


@dataclass(frozen=True)
class Manifest:
    dataset: str  # flickr8k, flickr30k, coco, synthetic...
    feature_extractor: dict[str, Any]  # model, weights, weights_sha256, crops
    feature_dim: int
    feature_dtype: str
    splits: dict[str, SplitInfo]
    build: dict[str, Any] = field(default_factory=dict)  # what was built from (fingerprint)
    # name -> store-relative path, e.g. the embedded world's senteval dir
    extras: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, data: bytes, where: str) -> Manifest:
        """The manifest ``data`` holds, every field checked; ``where`` names it in errors."""
        raw = parse_json(data, where)
        _expect(raw, dict, where, None, "a JSON object")
        version = _get(raw, "schema_version", int, where)
        if version != SCHEMA_VERSION:
            raise StoreError(
                f"{describe(where, 'schema_version')}: this code reads version {SCHEMA_VERSION}, "
                f"the store has {version}; rebuild it with `python -m storage.build`"
            )
        dtype = _get(raw, "feature_dtype", str, where)
        if dtype not in FEATURE_DTYPES:
            raise StoreError(
                f"{describe(where, 'feature_dtype')}: expected one of "
                f"{FEATURE_DTYPES}, got {dtype!r}"
            )
        splits_raw = _get(raw, "splits", dict, where)
        for name in splits_raw:
            _check_split_name(name, where)
        splits = {name: _split_from_dict(value, where, name) for name, value in splits_raw.items()}
        extras = raw.get("extras", {})
        _expect(extras, dict, where, "extras", "a JSON object")
        for key, value in extras.items():
            _check_extra(value, where, f"extras.{key}")
        build = raw.get("build", {})
        _expect(build, dict, where, "build", "a JSON object")
        return cls(
            dataset=_get(raw, "dataset", str, where),
            feature_extractor=_get(raw, "feature_extractor", dict, where),
            feature_dim=_count(raw, "feature_dim", where, low=1, high=MAX_FEATURE_DIM),
            feature_dtype=dtype,
            splits=splits,
            build=build,
            extras=extras,
            schema_version=version,
        )


def _split_from_dict(raw: Any, where: str, name: str) -> SplitInfo:
    prefix = f"splits.{name}"
    _expect(raw, dict, where, prefix, "a JSON object")

    def shards(key: str, kind: str) -> tuple[ShardInfo, ...]:
        items = _get(raw, key, list, where, prefix)
        out = []
        for i, item in enumerate(items):
            sub = f"{prefix}.{key}[{i}]"
            _expect(item, dict, where, sub, "a JSON object")
            out.append(
                ShardInfo(
                    _shard_path(_get(item, "path", str, where, sub), kind, name, i, where, sub),
                    _count(item, "rows", where, sub),
                    _get(item, "sha256", str, where, sub),
                )
            )
        return tuple(out)

    skipped = raw.get("skipped_images", [])
    if not isinstance(skipped, list) or not all(isinstance(s, str) for s in skipped):
        raise StoreError(
            f"{describe(where, f'{prefix}.skipped_images')}: expected a list of image ids "
            f"(strings), got {type(skipped).__name__}"
        )
    info = SplitInfo(
        images=_count(raw, "images", where, prefix),
        captions=_count(raw, "captions", where, prefix),
        image_shards=shards("image_shards", "images"),
        caption_shards=shards("caption_shards", "captions"),
        skipped_images=tuple(skipped),
        truncated_images=_count(raw, "truncated_images", where, prefix, default=0),
    )
    _check_counts(info, where, prefix)
    return info


def _check_counts(info: SplitInfo, where: str, prefix: str) -> None:
    """A split's counts agree with each other and with its shards' rows (each shard's
    rows are checked against the file as it is read): every reader sizes its arrays from
    them, so a manifest that disagrees is refused when it is parsed, before any work."""
    per_image = f"{CAPTIONS_PER_IMAGE} per image"
    agree = (
        ("images", info.images, sum(s.rows for s in info.image_shards), "its image_shards"),
        ("captions", info.captions, sum(s.rows for s in info.caption_shards), "its caption_shards"),
        ("captions", info.captions, info.images * CAPTIONS_PER_IMAGE, per_image),
    )
    for key, listed, expected, source in agree:
        if listed != expected:
            raise StoreError(
                f"{describe(where, f'{prefix}.{key}')}: lists {listed:,}, but {source} "
                f"make {expected:,}; the manifest was edited or belongs to another store "
                "(rebuild the store with `python -m storage.build`)"
            )


def _check_split_name(name: str, where: str) -> None:
    """Split names become parts of shard file names, so they must be plain names."""
    problem = name_problem(name)
    if problem is not None:
        raise StoreError(
            f"{describe(where, 'splits')}: expected split names made of {NAME_RULE}, "
            f"got {name!r}, which {problem}"
        )


def _shard_path(path: str, kind: str, split: str, index: int, where: str, at: str) -> str:
    """``path`` if it is exactly where the writer puts shard ``index`` of ``split``:
    anything else (another directory, '..', an absolute path) is refused."""
    expected = shard_name(kind, split, index)
    if path != expected:
        problem = path_problem(path)
        why = f", which {problem}" if problem is not None else ""
        raise StoreError(
            f"{describe(where, f'{at}.path')}: expected {expected!r} (shard {index} of "
            f"split {split!r} lives at {kind}/<split>-<k:05d>.parquet inside the store), "
            f"got {path!r}{why}"
        )
    return path


def _check_extra(value: Any, where: str, field_name: str) -> None:
    """An ``extras`` value names a file or directory inside the store."""
    problem = (
        path_problem(value)
        if isinstance(value, str)
        else f"is not a string ({type(value).__name__})"
    )
    if problem is not None:
        raise StoreError(
            f"{describe(where, field_name)}: expected a store-relative path ('/'-separated, "
            f"inside the store), got {value!r}, which {problem}"
        )


def _expect(value: Any, kind: type, where: str, field_name: str | None, what: str) -> None:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise StoreError(
            f"{describe(where, field_name)}: expected {what}, got {type(value).__name__}"
        )


def _count(
    raw: dict[str, Any],
    key: str,
    where: str,
    prefix: str | None = None,
    *,
    low: int = 0,
    high: int = MAX_COUNT,
    default: int | None = None,
) -> int:
    """``raw[key]``, an integer from ``low`` to ``high`` (a count, a dimension), or
    ``default`` when the key is absent and a default is given."""
    if default is not None and key not in raw:
        return default
    value: int = _get(raw, key, int, where, prefix)
    if not low <= value <= high:
        name = f"{prefix}.{key}" if prefix else key
        raise StoreError(
            f"{describe(where, name)}: expected an integer from {low} to {high:,}, got {value}"
        )
    return value


def _get(raw: dict[str, Any], key: str, kind: type, where: str, prefix: str | None = None) -> Any:
    name = f"{prefix}.{key}" if prefix else key
    if key not in raw:
        raise StoreError(f"{describe(where, name)}: missing (expected {kind.__name__})")
    _expect(raw[key], kind, where, name, kind.__name__)
    return raw[key]
