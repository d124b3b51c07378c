"""``python -m storage.inspect STORE``: summarise a feature store and verify every shard.

Prints the manifest summary (a line per split with its image and caption counts), then
checks every shard's presence, checksum, schema and row count, and the caption
alignment. Exits 0 when all is well, 2 naming the first bad shard otherwise.
"""

from __future__ import annotations

import sys

from storage._reader import FeatureStore
from storage._schema import Manifest
from storage.cli import OneLineParser, run_cli

__all__ = [
    "main",
    "summary",
]


def summary(manifest: Manifest, where: str) -> str:
    """The human-readable manifest summary that ``inspect`` and ``build`` print."""
    ext = manifest.feature_extractor
    lines = [
        f"store      {where}",
        f"dataset    {manifest.dataset}",
        f"features   {manifest.feature_dim} x {manifest.feature_dtype} from "
        f"{ext.get('model', '?')} (weights: {ext.get('weights', '?')})",
    ]
    for name, split in manifest.splits.items():
        notes = []
        if split.skipped_images:
            notes.append(f"{len(split.skipped_images)} unreadable images skipped")
        if split.truncated_images:
            notes.append(f"{split.truncated_images} images had > 5 captions, first 5 kept")
        lines.append(
            f"{name:<10} {split.images:>8,} images {split.captions:>9,} captions "
            f"in {len(split.image_shards)} shards" + (f" ({'; '.join(notes)})" if notes else "")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m storage.inspect", description=__doc__.split("\n")[0])
    parser.add_argument("store", help="store directory or URI (file://, s3://, gs://, hdfs://)")
    parser.add_argument("--no-verify", action="store_true", help="print the summary only")
    args = parser.parse_args(argv)

    def body() -> int:
        store = FeatureStore.open(args.store)
        print(summary(store.manifest, args.store))
        if not args.no_verify:
            count = store.verify()
            print(
                f"verified   {count} shards: checksums, schemas, row counts and caption alignment"
            )
        return 0

    return run_cli(body)


if __name__ == "__main__":
    sys.exit(main())
