"""``python -m storage.build``: build a feature store from real data or the embedded world.

Real data (Karpathy's split files and the image directory; ResNet-152 ten-crop features)::

    python -m storage.build karpathy --json dataset_flickr8k.json --images Flicker8k_Dataset \\
        --out stores/flickr8k [--weights resnet152-394f9c45.pth]

The embedded grounded world (generated scenes, images, captions and semantic sets)::

    python -m storage.build synthetic --out stores/world [--images 2000] [--seed 0]

A build writes shard by shard and the manifest last: run the same command again after
an interruption and it resumes where it stopped (adding --skip-unreadable, as the error
after an unreadable image advises, is allowed); run it on a finished store and it does
nothing. An --out that holds a different store is refused, and so is a data set that
leaves a split (train, val or test) without images.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

from storage._cli import HelpFormatter, Parser, run_cli
from storage._errors import StoreError, os_reason
from storage._extractors import FeatureExtractor
from storage._fs import Location
from storage._schema import FEATURE_COMPRESSIONS, FEATURE_DTYPES, Manifest
from storage._writer import StoreWriter
from storage.inspect import summary
from storage.karpathy import KNOWN_DATASETS, check_every_split, ingest, read_karpathy_json

__all__ = [
    "build_karpathy",
    "build_synthetic",
    "main",
]

WORLD_DIR = "world"  # where the embedded world's source files live inside its store
MIN_SCENES = 10  # the smallest world whose 80/10/10 split leaves every split an image
MAX_SCENES = 1_000_000  # eight times COCO; the world's JSON alone is ~1.3 GB at this size
MAX_WORKERS = 256  # image decoding processes
MAX_SEED = 2**63 - 1  # the scene projection's random generators take a signed 64-bit seed


def build_karpathy(
    json_path: str | os.PathLike[str],
    images: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    dataset: str | None = None,
    weights: str | None = None,
    device: str | None = None,
    batch_size: int = 32,
    workers: int = 2,
    shard_size: int = 1024,
    dtype: str = "float32",
    feature_compression: str = "none",
    skip_unreadable: bool = False,
) -> Manifest:
    """Build a store from a Karpathy JSON with ResNet-152 ten-crop features."""
    from storage.features import ResNetExtractor  # torch is only needed for this path

    _check_sizes(shard_size=shard_size, batch_size=batch_size, workers=workers)
    source = read_karpathy_json(json_path, dataset)
    images_dir = Path(images)
    if not images_dir.is_dir():
        raise StoreError(f"--images {images}: not a directory")
    extractor = ResNetExtractor(weights, device=device, batch_size=batch_size, num_workers=workers)
    check_every_split(source)  # before anything is written, so a fixed JSON can be rerun
    fingerprint = {
        "source": "karpathy",
        "dataset": source.name,
        "json_sha256": source.sha256,
        "images": str(images_dir.resolve()),
        "shard_size": shard_size,
        "skip_unreadable": skip_unreadable,
    }
    # A later run may add or drop --skip-unreadable (its advice after an unreadable
    # image): shards written without it hold only readable images, so both agree.
    writer = _writer(
        out, fingerprint, extractor, dtype, feature_compression, resumable=("skip_unreadable",)
    )
    return ingest(
        source,
        images_dir,
        extractor,
        writer,
        shard_size=shard_size,
        skip_unreadable=skip_unreadable,
    )


def build_synthetic(
    out: str | os.PathLike[str],
    *,
    images: int = 2000,
    seed: int = 0,
    features: str = "scene",
    weights: str | None = None,
    device: str | None = None,
    batch_size: int = 32,
    workers: int = 2,
    shard_size: int = 1024,
    dtype: str = "float32",
    feature_compression: str = "none",
) -> Manifest:
    """Generate the embedded world inside ``out/world`` and ingest it through the same
    Karpathy path as real data."""
    from storage.synthetic import generate_world

    _check_sizes(shard_size=shard_size, batch_size=batch_size, workers=workers)
    _check_world(images, seed)
    location = Location.parse(out)
    if not location.is_local:
        raise StoreError(
            f"--out {out}: the embedded world is generated on local disk; give a "
            "local directory (copy the finished store to shared storage afterwards)"
        )
    extractor = _world_extractor(features, seed, weights, device, batch_size, workers)
    fingerprint: dict[str, Any] = {
        "source": "synthetic",
        "images": images,
        "seed": seed,
        "shard_size": shard_size,
    }
    writer = _writer(out, fingerprint, extractor, dtype, feature_compression)
    if writer.manifest is not None:
        return writer.manifest
    world_dir = Path(location.root) / WORLD_DIR
    try:
        world = generate_world(world_dir, n_images=images, seed=seed)
    except OSError as err:
        where = err.filename or world_dir
        raise StoreError(f"{where}: cannot write the embedded world ({os_reason(err)})") from None
    source = read_karpathy_json(world.dataset_json)
    extras = {"world": WORLD_DIR, "senteval": f"{WORLD_DIR}/senteval"}
    return ingest(source, world.images, extractor, writer, shard_size=shard_size, extras=extras)


def _world_extractor(
    features: str, seed: int, weights: str | None, device: str | None, batch_size: int, workers: int
) -> FeatureExtractor:
    """The embedded world's feature extractor: its scene projection or ResNet-152."""
    if features == "scene":
        from storage.synthetic import SceneProjectionExtractor

        return SceneProjectionExtractor(seed=seed)
    if features == "resnet":
        from storage.features import ResNetExtractor

        return ResNetExtractor(weights, device=device, batch_size=batch_size, num_workers=workers)
    raise StoreError(f"--features: expected 'scene' or 'resnet', got {features!r}")


def _check_sizes(*, shard_size: int, batch_size: int, workers: int) -> None:
    """Refuse sizes no build can use, naming the option."""
    for flag, value, low in (
        ("--shard-size", shard_size, 1),
        ("--batch-size", batch_size, 1),
        ("--workers", workers, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise StoreError(f"{flag}: expected an integer of at least {low}, got {value!r}")
    if workers > MAX_WORKERS:  # each is a process: a typo must not fork thousands
        raise StoreError(f"--workers: expected at most {MAX_WORKERS} processes, got {workers}")


def _check_world(images: int, seed: int) -> None:
    """Refuse a world size or seed the generator cannot use, naming the option."""
    for flag, value, low, high in (
        ("--images", images, MIN_SCENES, MAX_SCENES),
        ("--seed", seed, 0, MAX_SEED),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise StoreError(f"{flag}: expected an integer from {low} to {high}, got {value!r}")


def _writer(
    out: str | os.PathLike[str],
    fingerprint: dict[str, Any],
    extractor: FeatureExtractor,
    dtype: str,
    feature_compression: str,
    resumable: tuple[str, ...] = (),
) -> StoreWriter:
    """The store writer of a build: its settings are part of the build's fingerprint."""
    fingerprint = {
        **fingerprint,
        "extractor": extractor.describe(),
        "dtype": dtype,
        "feature_compression": feature_compression,
    }
    return StoreWriter(
        out,
        fingerprint=fingerprint,
        feature_dim=extractor.dim,
        feature_dtype=dtype,
        feature_compression=feature_compression,
        resumable=resumable,
    )


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
    parser.add_argument(
        "--features",
        choices=("scene", "resnet"),
        default="scene",
        help="the scenes' projection, or ResNet-152 on the rendered images (default: %(default)s)",
    )
    _common_options(parser, resnet_only="; --features resnet only")


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python -m storage.build",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
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
                formatter_class=HelpFormatter,
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


def _run_karpathy(args: argparse.Namespace) -> Manifest:
    return build_karpathy(
        args.json,
        args.images,
        args.out,
        dataset=args.dataset,
        skip_unreadable=args.skip_unreadable,
        **_common_settings(args),
    )


def _run_synthetic(args: argparse.Namespace) -> Manifest:
    return build_synthetic(
        args.out,
        images=args.images,
        seed=args.seed,
        features=args.features,
        **_common_settings(args),
    )


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)

    def body() -> int:
        run = _run_karpathy if args.source == "karpathy" else _run_synthetic
        manifest = run(args)
        print(summary(manifest, args.out))
        return 0

    return run_cli(body)


if __name__ == "__main__":
    sys.exit(main())
