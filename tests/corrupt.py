"""Corrupt copies of a feature store, for the tests that every reading entry point
refuses a shard whose bytes no longer match its manifest checksum."""

from __future__ import annotations

import shutil
from pathlib import Path

FEATURE_SHARD = "images/train-00000.parquet"


def flip_byte(path: Path, position: float = 0.5) -> int:
    """Invert the byte at ``position`` (a fraction of the file's length); its offset."""
    data = bytearray(path.read_bytes())
    offset = min(len(data) - 1, int(len(data) * position))
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))
    return offset


def corrupt_copy(store: Path, out: Path, shard: str = FEATURE_SHARD, position: float = 0.5) -> Path:
    """A copy of ``store`` at ``out`` with one byte of ``shard`` flipped (the middle of a
    feature shard is feature data: it still parses, as a wrong feature value)."""
    shutil.copytree(store, out)
    flip_byte(out / shard, position)
    return out
