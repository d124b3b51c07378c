"""Writing the embedded grounded world: images, a Karpathy-format JSON and semantic sets.

The world stands in for Flickr8k/MSCOCO and SentEval where those cannot be downloaded,
and goes through exactly the same code paths: the JSON has Karpathy's layout (plus a
``scene`` per image, read by :class:`SceneProjectionExtractor`), the images are real
PNG files, and the semantic sets have SentEval's file layout. Layout of ``out_dir``::

    images/000000.png ...       one 64x64 RGB image per scene
    dataset_synthetic.json      Karpathy format: filename, imgid, split, sentids,
                                sentences (raw, tokens, imgid, sentid) x 5, scene
    senteval/                   STS/, SICK/ and suite.json (see _semantic)
    world.json                  seed, size, generator version and set sizes

The same seed gives byte-identical JSON and semantic files. Every file is written under
a temporary name and renamed into place; existing images are kept, so a re-run after
an interruption only draws what is missing, and removes the temporary files a killed
run left behind.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from storage._atomic import write_json_atomic, write_text_atomic
from storage._paths import is_temp_name
from storage.synthetic._captions import caption_scenes, tokenize
from storage.synthetic._render import IMAGE_SIZE, RenderJob
from storage.synthetic._scenes import Scene, generate_scene_arrays
from storage.synthetic._semantic import semantic_sizes, write_semantic_sets

logger = logging.getLogger(__name__)

GENERATOR_VERSION = "4"  # bump when the same seed would give a different world
DATASET_NAME = "synthetic"
DEFAULT_IMAGES = 2000
SPLIT_FRACTIONS = {"train": 0.8, "val": 0.1, "test": 0.1}
# Seed-sequence branches, so scenes, splits and captions never share random numbers
# (the semantic sets use branch 2, see _semantic).
_SCENE_STREAM, _SPLIT_STREAM, _CAPTION_STREAM = 0, 1, 3


@dataclass(frozen=True)
class WorldFiles:
    """Where :func:`generate_world` put everything."""

    root: Path  # out_dir
    images: Path  # directory of the PNG files (the ingestion's --images)
    dataset_json: Path  # Karpathy-format JSON (the ingestion's --json)
    senteval: Path  # SentEval data/downstream layout (the evaluation's --senteval)
    world_json: Path  # what was generated: seed, size, version, set sizes

    @classmethod
    def under(cls, out_dir: str | os.PathLike[str]) -> WorldFiles:
        """The paths of a world written to ``out_dir``."""
        root = Path(out_dir)
        return cls(
            root=root,
            images=root / "images",
            dataset_json=root / f"dataset_{DATASET_NAME}.json",
            senteval=root / "senteval",
            world_json=root / "world.json",
        )


def split_sizes(
    n_images: int, val_images: int | None = None, test_images: int | None = None
) -> dict[str, int]:
    """Images per split: ``val_images`` and ``test_images`` as given, 10% each by default,
    the rest for training. Karpathy's splits hold val and test sets of a fixed size
    whatever the training set's (Flickr8k's and Flickr30k's 1,000 images, COCO's 5,000),
    so a world can have Flickr8k's dev set without Flickr8k's training set."""
    val = round(n_images * SPLIT_FRACTIONS["val"]) if val_images is None else val_images
    test = round(n_images * SPLIT_FRACTIONS["test"]) if test_images is None else test_images
    if val < 1 or test < 1 or val + test >= n_images:
        raise ValueError(
            f"{val} val and {test} test images leave none of {n_images} for training; "
            f"expected at least 1 each and fewer than {n_images} together"
        )
    return {"train": n_images - val - test, "val": val, "test": test}


def assign_splits(
    n_images: int, seed: int, val_images: int | None = None, test_images: int | None = None
) -> list[str]:
    """The splits of :func:`split_sizes`, at random positions fixed by ``seed``."""
    sizes = split_sizes(n_images, val_images, test_images)
    labels = np.array([name for name, count in sizes.items() for _ in range(count)])
    rng = np.random.default_rng(np.random.SeedSequence([seed, _SPLIT_STREAM]))
    return [str(label) for label in labels[rng.permutation(n_images)]]


def image_filenames(n_images: int) -> list[str]:
    """``000000.png`` ...: zero-padded to at least six digits, so names sort in order."""
    width = max(6, len(str(max(n_images - 1, 0))))
    return [f"{k:0{width}d}.png" for k in range(n_images)]


def karpathy_json(
    scenes: list[Scene], captions: list[list[str]], splits: list[str], filenames: list[str]
) -> dict[str, Any]:
    """The dataset in Karpathy's format, each image entry carrying its ``scene``."""
    images = []
    sentid = 0
    for imgid, (scene, texts, split, filename) in enumerate(
        zip(scenes, captions, splits, filenames, strict=True)
    ):
        sentences = []
        for raw in texts:
            sentences.append(
                {"raw": raw, "tokens": tokenize(raw), "imgid": imgid, "sentid": sentid}
            )
            sentid += 1
        images.append(
            {
                "filename": filename,
                "imgid": imgid,
                "split": split,
                "sentids": [s["sentid"] for s in sentences],
                "sentences": sentences,
                "scene": scene.to_dict(),
            }
        )
    return {"dataset": DATASET_NAME, "images": images}


def _write_dataset(files: WorldFiles, scenes: list[Scene], splits: list[str], seed: int) -> None:
    """Caption the scenes and write the Karpathy-format JSON."""
    captions = caption_scenes(scenes, _caption_seed(seed))
    dataset = karpathy_json(scenes, captions, splits, image_filenames(len(scenes)))
    # Compact separators: the COCO-sized JSON is ~160 MB even so (Karpathy's is too).
    text = json.dumps(dataset, ensure_ascii=False, separators=(",", ":")) + "\n"
    write_text_atomic(files.dataset_json, text)


def generate_world(
    out_dir: str | os.PathLike[str],
    n_images: int = DEFAULT_IMAGES,
    seed: int = 0,
    *,
    val_images: int | None = None,
    test_images: int | None = None,
    render: bool = True,
    processes: int = 2,
) -> WorldFiles:
    """Write the embedded grounded world of ``n_images`` scenes under ``out_dir``.

    ``val_images`` and ``test_images``: the sizes of those splits (:func:`split_sizes`);
    ``render=False`` skips the PNG files (the scene-projection features do not need
    them); ``processes`` draws the images in parallel.
    """
    if isinstance(n_images, bool) or not isinstance(n_images, int) or n_images < 10:
        raise ValueError(f"n_images: expected an integer of at least 10, got {n_images!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: expected a non-negative integer, got {seed!r}")
    files = WorldFiles.under(out_dir)
    started = time.perf_counter()
    _remove_interrupted_writes(files)
    scenes = generate_scene_arrays(n_images, np.random.SeedSequence([seed, _SCENE_STREAM])).scenes()
    splits = assign_splits(n_images, seed, val_images, test_images)
    sizes = semantic_sizes(n_images)
    # The pool draws the images while this process writes the captions and sets.
    job = None
    if render:
        job = RenderJob(scenes, image_filenames(n_images), files.images, processes=processes)
    try:
        _write_dataset(files, scenes, splits, seed)
        counts = write_semantic_sets(files.senteval, seed, sizes)
        if job is not None:
            job.wait()
    finally:
        if job is not None:
            job.close()
    record = {
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "n_images": n_images,
        "image_size": IMAGE_SIZE,
        "rendered": render,
        "splits": {name: splits.count(name) for name in SPLIT_FRACTIONS},
        "semantic_sizes": asdict(sizes),
        "semantic_pairs": counts,
    }
    write_json_atomic(files.world_json, record)
    elapsed = time.perf_counter() - started
    logger.info("generated a world of %d images under %s in %.1f s", n_images, files.root, elapsed)
    return files


def _remove_interrupted_writes(files: WorldFiles) -> None:
    """Delete the temporary JSON and semantic-set files a killed run left behind (one
    writer per world; the image directory cleans up after itself, see _render)."""
    folders = [os.fspath(files.root)] + [top for top, _, _ in os.walk(files.senteval)]
    for folder in folders:
        if not os.path.isdir(folder):
            continue
        for entry in os.scandir(folder):
            if entry.is_file(follow_symlinks=False) and is_temp_name(entry.name):
                logger.info("removing %s, left by an interrupted run", entry.path)
                Path(entry.path).unlink(missing_ok=True)


def _caption_seed(seed: int) -> int:
    return int(np.random.SeedSequence([seed, _CAPTION_STREAM]).generate_state(1, np.uint64)[0])
