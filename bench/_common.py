"""What the training and evaluation benchmarks share: the embedded world they train on,
the store cut to the sizes they need, the device, and a one-line description of the
machine. Imports neither Ray nor MLflow."""

from __future__ import annotations

import os
import platform
import resource
import time
from dataclasses import replace
from pathlib import Path

import torch

from bench._cli import BadInput
from storage import FeatureStore, StoreError, build_synthetic
from trainables.data import EncodedSplit, TrainingData
from trainables.device import resolve_device

__all__ = [
    "REPO", "BadInput", "build_world", "device", "head", "load", "machine", "peak_rss_mib",
    "sync", "world",
]  # fmt: skip

REPO = Path(__file__).resolve().parents[1]


def world(store: str | None, images: int, scratch: str = "/tmp") -> str:
    """``store`` itself, or the embedded world of ``images`` images under ``scratch``
    (built once by ``storage.build``'s synthetic path, reused afterwards)."""
    if store:
        return store
    out = Path(scratch) / f"bench-world-{images}"
    started = time.perf_counter()
    build_world(out, images)
    took = time.perf_counter() - started
    if took > 1:
        print(f"built the embedded world of {images:,} images in {out} ({took:.0f} s)")
    return str(out)


def build_world(out: Path, images: int) -> None:
    """The embedded world of ``images`` images (seed 0) built into ``out``, or found
    there; a size the builder refuses is ``BadInput``."""
    try:
        build_synthetic(out, images=images, seed=0)
    except StoreError as e:
        raise BadInput(f"error: {e}") from None


def head(split: EncodedSplit, images: int, where: str) -> EncodedSplit:
    """The first ``images`` images of ``split`` and their captions; ``where`` names the
    split in the error when it holds fewer."""
    if images > split.num_images:
        _too_small(where, split.num_images, images)
    rows = 5 * images
    return EncodedSplit(
        split.features[:images],
        split.tokens[:rows],
        split.lengths[:rows],
        split.captions[:rows],
        split.image_ids[:images],
    )


def _too_small(where: str, have: int, images: int) -> None:
    raise BadInput(
        f"error: {where} has {have:,} images, the benchmark needs {images:,} "
        "(a larger --store, or fewer --images where the benchmark takes them)"
    )


def load(store: str, train_images: int | None, val_images: int | None = None) -> TrainingData:
    """The store's training data, its train and dev splits cut to their first
    ``train_images`` / ``val_images`` images (None: whole)."""
    try:
        manifest = FeatureStore.open(store).manifest
        # the sizes from the manifest, before any shard is read: a store too small is
        # refused without reading it
        for split, images, name in (("train", train_images, "train"), ("val", val_images, "dev")):
            have = manifest.splits[split].images if split in manifest.splits else 0
            if images is not None and images > have:
                _too_small(f"{store}: the {name} split", have, images)
        data = TrainingData.from_store(store)
    except StoreError as e:
        raise BadInput(f"error: --store {e}") from None
    if train_images is not None:
        data = replace(data, train=head(data.train, train_images, f"{store}: the train split"))
    if val_images is not None:
        data = replace(data, val=head(data.val, val_images, f"{store}: the dev split"))
    return data


def device(name: str) -> torch.device:
    """``--device`` as the library resolves it (``auto``, ``cpu``, ``cuda``, ``cuda:N``;
    a CUDA device always with its index); one the machine lacks is a ``BadInput``."""
    try:
        return resolve_device(name)
    except ValueError as e:
        raise BadInput(f"error: --{e}") from None


def sync(where: torch.device) -> None:
    if where.type == "cuda":
        torch.cuda.synchronize(where)


def peak_rss_mib() -> float:
    """This process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def machine(where: torch.device) -> str:
    if where.type == "cuda":
        what = torch.cuda.get_device_name(where)
    else:
        what = f"CPU ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"
    return f"{what}; Python {platform.python_version()}, torch {torch.__version__}"
