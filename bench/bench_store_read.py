"""Feature-store read speed against ``np.load`` of the same matrix from the same disk.

Goal (BENCHMARKS.md, "Feature-store reads"): reading COCO-sized features (123,287 x 2,048
float32) from the store runs at >= 50% of ``np.load``'s speed. Both are timed in this run,
side by side: warm (files in the page cache, best of ``--repeats``) and, when this process
may drop the page cache (root on Linux), cold. Each store is read twice: as fast as it
goes, and verified (every shard's sha256 checked against the manifest while it is read,
what training and evaluation do unless ``--no-verify``), so the cost of verifying is the
ratio of the two.

    python bench/bench_store_read.py [--images 123287] [--dir /tmp/bench-store]
    python bench/bench_store_read.py --store stores/world-coco   # an existing store's train split
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

if not __package__:  # run as a file: the repository first on sys.path (see bench/__init__.py)
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import numpy as np

from bench._cli import BadInput, entry, parser
from storage import StoreError, StoreWriter, open_store

DIM = 2048


def write_random_store(root: Path, n: int, compression: str, shard_size: int) -> None:
    """A store whose features look like ResNet's: non-negative, dense, skewed."""
    rng = np.random.default_rng(0)
    writer = StoreWriter(
        root,
        fingerprint={"bench": n, "compression": compression},
        feature_dim=DIM,
        feature_compression=compression,
    )
    records = []
    for k, start in enumerate(range(0, n, shard_size)):
        rows = min(shard_size, n - start)
        feats = rng.gamma(1.5, 0.3, size=(rows, DIM)).astype(np.float32)
        ids = [f"{start + i:07d}.jpg" for i in range(rows)]
        records.append(writer.write_shard("train", k, ids, feats, [["a caption"] * 5] * rows))
    writer.finish(
        dataset="bench", feature_extractor={"model": "gamma-noise"}, splits={"train": records}
    )


def drop_page_cache() -> bool:
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def timed(fn: Callable[[], object], repeats: int, cold: bool) -> float:
    best = float("inf")
    for _ in range(repeats):
        if cold:
            drop_page_cache()
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


@entry
def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--images", type=int, default=123_287, help="rows of the written stores")
    p.add_argument("--dir", type=Path, default=None,
                   help="scratch directory (default: a temporary one, removed after)")  # fmt: skip
    p.add_argument("--store", default=None, help="benchmark this existing store instead")
    p.add_argument("--compression", nargs="+", default=["lz4", "none", "zstd"],
                   help="the codecs of the written stores")  # fmt: skip
    p.add_argument("--shard-size", type=int, default=1024, help="images per shard")
    p.add_argument("--repeats", type=int, default=3, help="best of this many reads")
    p.add_argument("--warm-only", action="store_true",
                   help="skip the cold reads even where this process may drop the page cache "
                   "(dropping it slows everything else running on the machine)")  # fmt: skip
    args = p.parse_args(argv)
    if min(args.images, args.shard_size, args.repeats) < 1:
        p.error("--images, --shard-size and --repeats: expected at least 1")
    try:
        if args.dir is not None:
            _measure(args, args.dir)
        else:  # removed after, whatever happened in it
            with tempfile.TemporaryDirectory(prefix="bench-store-") as scratch:
                _measure(args, Path(scratch))
    except StoreError as e:
        raise BadInput(f"error: {'--store ' if args.store else ''}{e}") from None
    return 0


def _measure(args: argparse.Namespace, scratch: Path) -> None:
    scratch.mkdir(parents=True, exist_ok=True)
    stores = {"given": args.store} if args.store else {}
    for codec in [] if args.store else args.compression:
        root = scratch / f"store-{codec}"
        shutil.rmtree(root, ignore_errors=True)
        started = time.perf_counter()
        write_random_store(root, args.images, codec, args.shard_size)
        size = sum(f.stat().st_size for f in root.rglob("*.parquet")) / 2**20
        print(f"wrote {codec:>5} store: {time.perf_counter() - started:6.1f} s, {size:,.0f} MiB")
        stores[codec] = str(root)
    reference = open_store(next(iter(stores.values()))).read_features("train")[1]
    npy = scratch / "features.npy"
    np.save(npy, reference)
    print(
        f"matrix {reference.shape[0]:,} x {reference.shape[1]:,} {reference.dtype} "
        f"({reference.nbytes / 2**20:,.0f} MiB), {os.cpu_count()} cores"
    )
    can_drop = not args.warm_only and drop_page_cache()
    for cold in (False, True) if can_drop else (False,):
        label = "cold" if cold else "warm"
        base = timed(lambda: np.load(npy), args.repeats, cold)
        print(f"[{label}] np.load {base:.3f} s ({reference.nbytes / base / 2**30:.2f} GiB/s)")
        for codec, where in stores.items():
            store = open_store(where)
            took = timed(partial(store.read_features, "train"), args.repeats, cold)
            print(
                f"[{label}] store {codec:>5} {took:.3f} s  ratio vs np.load {base / took:.2f} "
                f"(goal >= 0.50)"
            )
            checked = timed(partial(store.read_features, "train", verify=True), args.repeats, cold)
            print(
                f"[{label}] store {codec:>5} verified {checked:.3f} s  ratio vs np.load "
                f"{base / checked:.2f}; verifying costs {100 * (checked / took - 1):+.0f}%"
            )
    if args.warm_only:
        print("(cold runs skipped: --warm-only)")
    elif not can_drop:
        print("(cold runs skipped: this process may not drop the page cache)")


if __name__ == "__main__":
    raise SystemExit(main())
