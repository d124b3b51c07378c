"""Training data in memory, and the paper's batching (docs/protocols.md section 3).

``TrainingData`` holds every split as plain numpy arrays (features, captions encoded as
padded uint8 character indices, lengths, and the caption strings), so it is read from
the store once, shared through Ray's object store without copies, and moved to the GPU
once per trial. A word-level trial encodes the captions again with its own vocabulary
(``EncodedSplit.encoded_with``), built from the training captions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch

from storage import (
    CAPTIONS_PER_IMAGE,
    MAX_CAPTION_CHARS,
    FeatureStore,
    SplitData,
    check_caption_lengths,
)
from trainables.model import CharEncoding
from trainables.vocabulary import UNKNOWN_INDEX, Tokenizer, WordVocabulary

__all__ = [
    "MAX_CAPTION_CHARS",
    "DeviceSplit",
    "EncodedSplit",
    "TrainingData",
    "default_senteval",
    "device_splits",
    "epoch_batches",
    "partner_rows",
]

RowsT = TypeVar("RowsT", np.ndarray, torch.Tensor)


logger = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class EncodedSplit:
    """One split; caption ``j`` belongs to image ``j // 5``."""

    features: np.ndarray  # (N, D) float32
    # (5N, T) token indices, 0 = padding: uint8 characters (TrainingData.from_store), or
    # words (uint8 up to 256 indices, else int32)
    tokens: np.ndarray
    lengths: np.ndarray  # (5N,) int64
    captions: np.ndarray  # (5N,) object: the caption strings, encoded again by word models
    image_ids: np.ndarray  # (N,) object

    @property
    def num_images(self) -> int:
        return len(self.features)

    @classmethod
    def from_split(cls, split: SplitData, encoding: Tokenizer) -> EncodedSplit:
        captions = split.captions.reshape(-1)
        tokens, lengths = encoding.encode(list(captions))
        return cls(
            np.ascontiguousarray(split.features, dtype=np.float32),
            _compact(tokens, encoding.size),
            lengths,
            captions,
            split.image_ids,
        )

    def encoded_with(self, tokenizer: Tokenizer) -> EncodedSplit:
        """The same split, its captions encoded by ``tokenizer`` (the arrays of
        features, captions and image ids are shared, not copied)."""
        tokens, lengths = tokenizer.encode(list(self.captions))
        return EncodedSplit(
            self.features, _compact(tokens, tokenizer.size), lengths, self.captions, self.image_ids
        )


def _compact(tokens: np.ndarray, size: int) -> np.ndarray:
    """Indices in the smallest type that holds ``size`` of them (the GPU copy of a
    split's captions stays small; a batch is made int64 when it is used)."""
    dtype = np.uint8 if size <= 256 else np.int32
    return tokens if tokens.dtype == dtype else tokens.astype(dtype)


@dataclass(frozen=True, eq=False)
class TrainingData:
    train: EncodedSplit
    val: EncodedSplit
    test: EncodedSplit
    source: str  # the store it was read from

    @property
    def feature_dim(self) -> int:
        return int(self.train.features.shape[1])

    @classmethod
    def from_store(cls, where: str, *, verify: bool = True) -> TrainingData:
        """Read the three splits of the store at ``where``. With ``verify`` (the default)
        every shard is checked against the manifest's sha256 while it is read, and a
        corrupt or replaced shard raises ``StoreError`` naming it; ``verify=False`` skips
        the hashing (see BENCHMARKS.md for what it costs)."""
        store = FeatureStore.open(where)
        encoding = CharEncoding()
        read = {name: store.read_split(name, verify=verify) for name in ("train", "val", "test")}
        for split in read.values():  # a store built before storage.build refused them
            check_caption_lengths(where, split.name, split.image_ids, split.captions)
        splits = {name: EncodedSplit.from_split(split, encoding) for name, split in read.items()}
        if encoding.unknown_count:
            logger.warning(
                "%d caption characters are outside the alphabet and were mapped to "
                "the unknown index",
                encoding.unknown_count,
            )
        return cls(**splits, source=where)


class DeviceSplit:
    """A split's tensors on the training device (captions in the smallest integer type
    that holds their indices, to save memory; lengths stay on the CPU for packing)."""

    def __init__(self, split: EncodedSplit, device: torch.device) -> None:
        self.features = torch.from_numpy(split.features).to(device)
        self.tokens = torch.from_numpy(split.tokens).to(device)
        self.lengths = torch.from_numpy(split.lengths)
        self.num_images = split.num_images


def device_splits(
    data: TrainingData, device: torch.device, tokenizer: Tokenizer
) -> tuple[DeviceSplit, DeviceSplit, DeviceSplit]:
    """Train, dev and test on ``device``, encoded for the model of ``tokenizer``: as the
    data hold them (characters), or again with a word vocabulary (its unknown words in
    the dev and test captions logged)."""
    splits = [data.train, data.val, data.test]
    if isinstance(tokenizer, WordVocabulary):
        splits = [split.encoded_with(tokenizer) for split in splits]
        unknown = [int((split.tokens == UNKNOWN_INDEX).sum()) for split in splits[1:]]
        logger.info("dev and test captions: %d and %d unknown words", *unknown)
    train, val, test = (DeviceSplit(split, device) for split in splits)
    return train, val, test


def epoch_batches(num_images: int, batch_size: int, seed: int, epoch: int) -> np.ndarray:
    """The caption rows of every minibatch of one epoch: ``(steps, batch_size)``.

    The training images are shuffled once per epoch (seeded by ``seed`` and ``epoch``, so
    a resumed run sees the same order); then five passes, pass k pairing every image
    with its k-th caption, cut into batches of ``batch_size`` images in the shuffled
    order with the last short batch dropped. No image is twice in a batch, so there
    are no false negatives. Image ``i`` of caption row ``r`` is ``r // 5``.
    """
    order = np.random.default_rng([seed, epoch]).permutation(num_images)
    per_pass = num_images // batch_size
    images = order[: per_pass * batch_size].reshape(per_pass, batch_size)
    passes = [images * CAPTIONS_PER_IMAGE + k for k in range(CAPTIONS_PER_IMAGE)]
    return np.concatenate(passes, axis=0)


def partner_rows(rows: RowsT) -> RowsT:
    """The caption row paired with each of ``rows`` by the text-only control
    (``pairing="caption"``): the next caption of the same image, cyclically (the 5th
    pairs with the 1st). Over an epoch's five passes every caption is paired with both
    of its neighbours; rows of distinct images stay distinct, so there are no false
    negatives in a batch. ``rows``: a numpy array or a torch tensor."""
    k = rows % CAPTIONS_PER_IMAGE
    return rows - k + (k + 1) % CAPTIONS_PER_IMAGE


def default_senteval(store: str) -> str | None:
    """The semantic sets that came with a store (the embedded world's), if any."""
    extras = FeatureStore.open(store).manifest.extras
    if "senteval" not in extras:
        return None
    return str(Path(store) / extras["senteval"])
