"""Embeddings of images and captions by one model or a snapshot ensemble: pure functions
shared by the ``Trainer`` (evaluation), ``analysis`` (rebuilt ensembles) and the encoder
API.

An ensemble's embedding is the **sum** of its models' embeddings on both sides, not
renormalised (docs/protocols.md section 3: this is what reproduces the authors' rankings);
one model's is L2-normalised by the model itself. Captions are encoded in length-sorted
batches (so a batch holds little padding) and returned in their original order; nothing
here depends on how the sentences were batched, beyond floating-point rounding.

    images = embed_images(models, features)                # (N, 2n)
    captions = embed_captions(models, tokens, lengths)     # (5N, 2n)
    sentences = embed_sentences(models, ["A red circle."])  # (1, 2n)

Sentences are encoded by the models' own input (``caption_encoder.tokenizer``: the
alphabet of a character model, the vocabulary of a word model); every model of an
ensemble shares it.

On the CPU the RNN families (``char_rnn``, ``word_rnn``) embed without padding: the
captions sorted by length once, each batch packed once, through the training recurrence
(``CaptionEncoder.encode_packed``). A fixed set (a split's tensors, the semantic sets'
sentences) is sorted, encoded and packed the first time it is embedded and kept for the
next (a few sets, the most recent; a tensor changed in place is packed again); a
sentence set seen again is not encoded again, its unknown symbols counted again as if it
were. The embeddings are those of the padded path up to the order of the sums
(tests/tolerances.py's ``REORDERED`` bound).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from trainables import _packed_rnn_cpp
from trainables.device import autocast
from trainables.model import CaptionEncoder, CharEncoding, GroundedEncoder, PackedCaptions
from trainables.vocabulary import Tokenizer

__all__ = [
    "PACKED_BATCH_SIZE",
    "SPACES",
    "default_batch_size",
    "embed_captions",
    "embed_images",
    "embed_sentences",
]

# the two embeddings of a caption: compared with images, or as a sentence embedding
SPACES = ("joint", "sentence")
# captions per batch on the packed path (``batch_size`` 0): its rows' attention then stays
# nearer the cache than at the padded path's 256 (BENCHMARKS.md)
PACKED_BATCH_SIZE = 128
_KEPT = 8  # the sets whose packing is kept (the most recently used; a Trainer embeds four)


def default_batch_size(device: torch.device) -> int:
    """Sentences encoded at once: 1,024 on a GPU; 256 on a CPU, where a batch's
    ``(B, T, 2n)`` activations then stay in cache (1.9x faster than 1,024 at n=256,
    BENCHMARKS.md)."""
    return 1024 if device.type == "cuda" else 256


def _device(models: Sequence[GroundedEncoder]) -> torch.device:
    if not models:
        raise ValueError("models: expected at least one model")
    return next(models[0].parameters()).device


@torch.inference_mode()
def embed_images(models: Sequence[GroundedEncoder], features: torch.Tensor) -> torch.Tensor:
    """``(N, 2n)`` image embeddings of ``features`` (N, D) on the models' device, summed
    over ``models``."""
    device = _device(models)
    features = features.to(device)
    total = torch.zeros(features.shape[0], models[0].joint_dim, device=device)
    for model in models:
        total += model.eval().image_encoder(features).float()
    return total


@torch.inference_mode()
def embed_captions(
    models: Sequence[GroundedEncoder],
    tokens: torch.Tensor,
    lengths: torch.Tensor,
    *,
    batch_size: int = 0,
    precision: str = "fp32",
    space: str = "joint",
) -> torch.Tensor:
    """``(B, 2n)`` embeddings of encoded captions (``tokens`` (B, T) indices, characters
    or words, on any device, ``lengths`` (B,) on the CPU), summed over ``models``;
    ``batch_size`` 0 = ``default_batch_size`` (on the packed path ``PACKED_BATCH_SIZE``);
    ``precision`` "bf16" runs under autocast.
    ``space``: "joint" (compared with images, retrieval) or "sentence" (the sentence
    embeddings; they differ only for cap2img, ``GroundedEncoder``)."""
    if space not in SPACES:
        raise ValueError(f"space: got {space!r}, expected one of {', '.join(SPACES)}")
    device = _device(models)
    dim = models[0].joint_dim if space == "joint" else models[0].embedding_dim
    if _packs(models, precision):
        packing = _packing_of(tokens, lengths, batch_size or PACKED_BATCH_SIZE)
        return _embed_packed(models, packing, dim)
    size = batch_size or default_batch_size(device)
    order = torch.argsort(lengths, descending=True)
    out = torch.zeros(len(lengths), dim, device=device)
    for start in range(0, len(order), size):
        rows = order[start : start + size]
        width = int(lengths[rows[0]])
        batch = tokens[rows.to(tokens.device), :width].to(device).long()
        on_device = rows.to(device)
        for model in models:
            encoder = model.eval().caption_encoder
            with autocast(device, precision):
                if space == "joint":
                    emb = encoder(batch, lengths[rows])
                else:
                    emb = encoder.sentence(batch, lengths[rows])
            out[on_device] += emb.float()
    return out


def embed_sentences(
    models: Sequence[GroundedEncoder],
    sentences: Sequence[str],
    *,
    batch_size: int = 0,
    precision: str = "fp32",
    encoding: Tokenizer | None = None,
    space: str = "sentence",
) -> torch.Tensor:
    """``(len(sentences), 2n)`` embeddings of raw sentences, encoded with ``encoding``
    (default: the models' own tokenizer; unknown symbols are counted there); the
    sentence embeddings, or with ``space="joint"`` the ones compared with images."""
    if encoding is None:
        encoding = models[0].caption_encoder.tokenizer if models else CharEncoding()
    if models and _packs(models, precision):
        dim = models[0].joint_dim if space == "joint" else models[0].embedding_dim
        packing = _packing_of_sentences(encoding, sentences, batch_size or PACKED_BATCH_SIZE)
        return _embed_packed(models, packing, dim)
    tokens, lengths = encoding.encode(list(sentences))
    return embed_captions(
        models,
        torch.from_numpy(tokens),
        torch.from_numpy(lengths),
        batch_size=batch_size,
        precision=precision,
        space=space,
    )


# -- the CPU's packed path (module docstring) ---------------------------------------------


@dataclass(frozen=True)
class _Packing:
    """A caption set sorted longest first (stable) and cut into batches of ``size``, each
    packed: ``rows`` (the set's rows of each batch) and its ``PackedCaptions``."""

    count: int
    batches: tuple[tuple[torch.Tensor, PackedCaptions], ...]

    @classmethod
    def of(cls, tokens: torch.Tensor, lengths: torch.Tensor, size: int) -> _Packing:
        tokens = tokens.cpu()
        order = torch.argsort(lengths, descending=True, stable=True)
        batches = []
        for start in range(0, len(order), size):
            rows = order[start : start + size]
            batch = tokens[rows, : int(lengths[rows[0]])]
            batches.append((rows, PackedCaptions.of(batch, lengths[rows])))
        return cls(len(lengths), tuple(batches))


@dataclass(frozen=True)
class _Kept:
    """A set's packing and what it was made from: the objects themselves (kept alive, so
    their ids stay theirs) and the tensors' versions (a change in place packs again)."""

    sources: tuple[object, ...]
    versions: tuple[int, ...]
    packing: _Packing
    unknown: int = 0  # the unknown symbols its encoding counted (a sentence set)


_kept: OrderedDict[Hashable, _Kept] = OrderedDict()
_kept_lock = threading.Lock()  # the battery's worker thread embeds beside the training thread


def _packs(models: Sequence[GroundedEncoder], precision: str) -> bool:
    """Whether ``models`` embed through the packed path: on the CPU, float32 or float64
    weights without autocast, RNN families, and the C++ loop built. (The padded path, on
    the CPU too, is the reference the tests and bench/bench_eval.py hold this one to.)"""
    if precision == "bf16" or _device(models).type != "cpu":
        return False
    for model in models:
        weight = next(model.parameters())
        if not isinstance(model.caption_encoder, CaptionEncoder):
            return False
        if weight.dtype not in (torch.float32, torch.float64):
            return False
    return _packed_rnn_cpp.extension() is not None


def _versions(tensors: Sequence[torch.Tensor]) -> tuple[int, ...] | None:
    """The tensors' version counters (None: an inference tensor, which has none)."""
    if any(t.is_inference() for t in tensors):
        return None
    return tuple(t._version for t in tensors)


def _recall(key: Hashable, sources: tuple[object, ...], versions: tuple[int, ...]) -> _Kept | None:
    with _kept_lock:
        kept = _kept.get(key)
        if kept is None or kept.versions != versions:
            return None
        if any(a is not b for a, b in zip(kept.sources, sources, strict=True)):
            return None
        _kept.move_to_end(key)
        return kept


def _keep(key: Hashable, kept: _Kept) -> None:
    with _kept_lock:
        _kept[key] = kept
        _kept.move_to_end(key)
        while len(_kept) > _KEPT:
            _kept.popitem(last=False)


def _packing_of(tokens: torch.Tensor, lengths: torch.Tensor, size: int) -> _Packing:
    """The packing of a caption set given as tensors, kept by their identity."""
    versions = _versions((tokens, lengths))
    if versions is None:
        return _Packing.of(tokens, lengths, size)
    key = ("tensors", id(tokens), id(lengths), size)
    kept = _recall(key, (tokens, lengths), versions)
    if kept is None:
        kept = _Kept((tokens, lengths), versions, _Packing.of(tokens, lengths, size))
        _keep(key, kept)
    return kept.packing


def _packing_of_sentences(encoding: Tokenizer, sentences: Sequence[str], size: int) -> _Packing:
    """The packing of raw sentences encoded with ``encoding``, kept by the sentences
    (and the encoding's identity); a set seen again adds its unknown symbols to
    ``encoding.unknown_count`` as encoding it again would."""
    text = tuple(sentences)
    key = ("sentences", id(encoding), size, text)
    kept = _recall(key, (encoding,), ())
    if kept is None:
        before = encoding.unknown_count
        tokens, lengths = encoding.encode(list(text))
        packing = _Packing.of(torch.from_numpy(tokens), torch.from_numpy(lengths), size)
        kept = _Kept((encoding,), (), packing, encoding.unknown_count - before)
        _keep(key, kept)
    else:
        encoding.unknown_count += kept.unknown
    return kept.packing


@torch.inference_mode()
def _embed_packed(models: Sequence[GroundedEncoder], packing: _Packing, dim: int) -> torch.Tensor:
    """``embed_captions``' sums on the packed path: each batch through every model."""
    out = torch.zeros(packing.count, dim)
    for rows, captions in packing.batches:
        for model in models:
            encoder = model.eval().caption_encoder
            assert isinstance(encoder, CaptionEncoder)
            out[rows] += encoder.encode_packed(captions).float()
    return out
