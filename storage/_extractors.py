"""The contract between the ingestion path and the feature extractors.

An extractor turns a batch of images, as listed in a Karpathy-format JSON, into one
feature vector each. The ResNet-152 ten-crop extractor (``storage.features``) reads the
image files; the embedded world's scene projection (``storage.synthetic``) reads the
scene description stored beside each JSON entry. Both go through the same ingestion
code (``storage.karpathy``), so the embedded world exercises the real data path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True)
class ImageItem:
    """One image of a Karpathy JSON, resolved for extraction."""

    image_id: str  # stable id stored in the feature shards (the JSON's filepath/filename)
    path: Path  # the image file on disk (inside the --images directory)
    entry: Mapping[str, Any]  # the raw JSON entry, for extractors that need more than pixels


class FeatureExtractor(Protocol):
    """Computes one ``dim``-dimensional feature vector per image."""

    @property
    def dim(self) -> int:
        """Length of every feature vector."""
        ...

    def describe(self) -> dict[str, Any]:
        """What the manifest records under ``feature_extractor`` (model, weights, crops...)."""
        ...

    def extract(self, items: Sequence[ImageItem]) -> tuple[np.ndarray, list[str | None]]:
        """Features for ``items`` as a ``(len(items), dim)`` float32 array, and per item
        ``None`` when it worked or a short reason (``"missing"``, ``"unreadable: ..."``) when
        the image could not be read; the rows of failed items are zeros. The caller decides
        whether a failure stops the build or the image is skipped."""
        ...
