"""``python -m storage.build``: build a feature store from real data or the embedded world.

Real data (Karpathy's split files and the image directory; ResNet-152 ten-crop features)::

    python -m storage.build karpathy --json dataset_flickr8k.json --images Flicker8k_Dataset \\
        --out stores/flickr8k [--weights resnet152-394f9c45.pth]

The embedded grounded world (generated scenes, images, captions and semantic sets)::

    python -m storage.build synthetic --out stores/world [--images 2000] [--seed 0] \\
        [--val-images N] [--test-images N]

A build writes shard by shard and the manifest last: run the same command again after
an interruption and it resumes where it stopped (adding --skip-unreadable, as the error
after an unreadable image advises, is allowed); run it on a finished store and it does
nothing. An --out that holds a different store is refused, and so is a data set that
leaves a split (train, val or test) without images.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import Any

from storage._build import (
    MAX_SCENES,
    MAX_WORKERS,
    MIN_SCENES,
    build_karpathy,
    build_synthetic,
)
from storage._schema import FEATURE_COMPRESSIONS, FEATURE_DTYPES
from storage.cli import ExamplesHelpFormatter, OneLineParser, run_cli
from storage.inspect import summary
from storage.karpathy import KNOWN_DATASETS

__all__ = [
    "build_karpathy",
    "build_synthetic",
    "main",
]

DESCRIPTION = "Build a feature store from real data or the embedded world."
EPILOG = """examples:
  python -m storage.build karpathy --json dataset_flickr8k.json --images Flicker8k_Dataset \\
      --out stores/flickr8k
  python -m storage.build synthetic --out stores/world

A build writes shard by shard and the manifest last: run the same command again after an
interruption and it resumes where it stopped (adding --skip-unreadable, as the error after
an unreadable image advises, is allowed); run it on a finished store and it does nothing.
An --out that holds a different store is refused, and so is a data set that leaves a split
(train, val or test) without images.

Exit status: 0, 2 with one 'error:' line naming the option or file, 130 interrupted."""


def _common_options(parser: argparse.ArgumentParser, resnet_only: str = "") -> None:
    """The options both builds take; ``resnet_only`` marks those only ResNet features use."""
    parser.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="the store directory (or URI) to write; required",
    )
    parser.add_argument(
        "--weights",
        default=None,
        metavar="FILE",
        help=f"ResNet-152 weights file, or 'random'{resnet_only} (default: torchvision's cache)",
    )
    parser.add_argument(
        "--device",
        default=None,
        help=f"auto, cpu, cuda or cuda:N{resnet_only} (default: auto, cuda if available)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=32,
        metavar="N",
        help=f"images per forward pass{resnet_only} (default: %(default)s)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        metavar="N",
        help=f"image decoding processes, 0 to {MAX_WORKERS}{resnet_only} (default: %(default)s)",
    )
    parser.add_argument(
        "--shard-size", type=int, default=1024, metavar="N",
        help="images per Parquet shard (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--dtype",
        choices=FEATURE_DTYPES,
        default="float32",
        help="stored feature precision (default: %(default)s)",
    )
    parser.add_argument(
        "--feature-compression",
        choices=FEATURE_COMPRESSIONS,
        default="none",
        help="Parquet codec of the feature column; BENCHMARKS.md compares them "
        "(default: %(default)s)",
    )


def _karpathy_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        required=True,
        metavar="FILE",
        help="Karpathy's dataset_{flickr8k,flickr30k,coco}.json; required",
    )
    parser.add_argument(
        "--images", required=True, metavar="DIR", help="directory holding the images; required"
    )
    parser.add_argument(
        "--dataset",
        choices=KNOWN_DATASETS,
        default=None,
        help="data set name (default: from the JSON, else its file name)",
    )
    parser.add_argument(
        "--skip-unreadable",
        action="store_true",
        help="leave out missing/unreadable images (counted in the manifest) instead of stopping",
    )
    _common_options(parser)


def _synthetic_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--images",
        type=int,
        default=2000,
        metavar="N",
        help=f"number of scenes (images), {MIN_SCENES} to {MAX_SCENES:,} (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="world seed, 0 to 2**63-1 (default: %(default)s)"
    )
    for split in ("val", "test"):
        parser.add_argument(
            f"--{split}-images",
            type=int,
            metavar="N",
            help=f"images in the {split} split (default: 10%% of --images); Karpathy's "
            "Flickr8k split holds 1,000, COCO's 5,000",
        )
    parser.add_argument(
        "--features",
        choices=("scene", "resnet"),
        default="scene",
        help="the scenes' projection, or ResNet-152 on the rendered images (default: %(default)s)",
    )
    _common_options(parser, resnet_only="; --features resnet only")


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m storage.build",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=ExamplesHelpFormatter,
    )
    sub = parser.add_subparsers(dest="source", required=True)
    karpathy = "Flickr8k/Flickr30k/COCO from Karpathy's JSON (ResNet-152 ten-crop features)"
    synthetic = "the embedded grounded world (generated scenes, images, captions, semantic sets)"
    for name, what, options in (
        ("karpathy", karpathy, _karpathy_options),
        ("synthetic", synthetic, _synthetic_options),
    ):
        options(
            sub.add_parser(
                name,
                help=what,
                description=textwrap.fill(f"{DESCRIPTION} This one: {what}.", 88),
                epilog=EPILOG.split("\n\n", 1)[1],
                formatter_class=ExamplesHelpFormatter,
            )
        )
    return parser


def _common_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments that both builds take, from the parsed options."""
    return dict(
        weights=args.weights,
        device=args.device,
        batch_size=args.batch_size,
        workers=args.workers,
        shard_size=args.shard_size,
        dtype=args.dtype,
        feature_compression=args.feature_compression,
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    def body() -> int:
        if args.source == "karpathy":
            manifest = build_karpathy(
                args.json,
                args.images,
                args.out,
                dataset=args.dataset,
                skip_unreadable=args.skip_unreadable,
                **_common_settings(args),
            )
        else:
            manifest = build_synthetic(
                args.out,
                images=args.images,
                seed=args.seed,
                val_images=args.val_images,
                test_images=args.test_images,
                features=args.features,
                **_common_settings(args),
            )
        print(summary(manifest, args.out))
        return 0

    return run_cli(body)


if __name__ == "__main__":
    sys.exit(main())
