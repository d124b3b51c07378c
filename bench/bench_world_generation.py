"""Time to build the embedded world at COCO size (123,287 images, 616,435 captions).

Goal (BENCHMARKS.md, "Embedded world at COCO size"): under 2 minutes on this 2-core
machine for the whole ``python -m storage.build synthetic`` (scenes, images, captions,
semantic sets, features, Parquet shards and manifest). Also prints the share of each
stage.

    python bench/bench_world_generation.py [--images 123287] [--dir /tmp/bench-world]
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

if not __package__:  # run as a file: the repository first on sys.path (see bench/__init__.py)
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench._cli import BadInput, entry, parser
from storage import StoreError, build_synthetic, open_store

GOAL_SECONDS = 120.0


class _StageTimer(logging.Handler):
    """Stamps the build's own log lines, to split its time into stages."""

    def __init__(self) -> None:
        super().__init__()
        self.start = time.perf_counter()
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((time.perf_counter() - self.start, record.getMessage()))


@entry
def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--images", type=int, default=123_287, help="the world's size")
    p.add_argument("--dir", type=Path, default=None,
                   help="where to build it (default: a temporary folder, removed "
                   "after)")  # fmt: skip
    args = p.parse_args(argv)
    if args.dir is not None:
        return _generate(args.images, args.dir)
    with tempfile.TemporaryDirectory(prefix="bench-world-") as scratch:  # removed after
        return _generate(args.images, Path(scratch))


def _generate(images: int, scratch: Path) -> int:
    out = scratch / "store"
    shutil.rmtree(out, ignore_errors=True)
    timer = _StageTimer()
    logging.basicConfig(level=logging.INFO, handlers=[timer])
    started = time.perf_counter()
    try:
        manifest = build_synthetic(out, images=images, seed=0)
    except StoreError as e:
        raise BadInput(f"error: {e}") from None
    total = time.perf_counter() - started
    for at, line in timer.lines:
        if "shard" not in line or "shard 1:" in line:
            print(f"  {at:7.1f} s  {line[:110]}")
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) / 2**20
    print(
        f"built {sum(s.images for s in manifest.splits.values()):,} images "
        f"({size:,.0f} MiB on disk) in {total:.1f} s on {os.cpu_count()} cores; "
        f"{total / GOAL_SECONDS:.2f} of the {GOAL_SECONDS:.0f} s goal"
    )
    verify_started = time.perf_counter()
    shards = open_store(out).verify()
    print(f"inspect verified {shards} shards in {time.perf_counter() - verify_started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
