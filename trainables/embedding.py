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
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trainables.model import CharEncoding, GroundedEncoder
from trainables.vocabulary import Tokenizer

__all__ = ["SPACES", "default_batch_size", "embed_captions", "embed_images", "embed_sentences"]

# the two embeddings of a caption: compared with images, or as a sentence embedding
SPACES = ("joint", "sentence")


def default_batch_size(device: torch.device) -> int:
    """Sentences encoded at once: 1,024 on a GPU; 256 on a CPU, where a batch's
    ``(B, T, 2n)`` activations then stay in cache (1.9x faster than 1,024 at n=256,
    BENCHMARKS.md)."""
    return 1024 if device.type == "cuda" else 256


def _device(models: Sequence[GroundedEncoder]) -> torch.device:
    if not models:
        raise ValueError("models: expected at least one model")
    return next(models[0].parameters()).device


def _autocast(device: torch.device, precision: str) -> torch.autocast:
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


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
    ``batch_size`` 0 = ``default_batch_size``; ``precision`` "bf16" runs under autocast.
    ``space``: "joint" (compared with images, retrieval) or "sentence" (the sentence
    embeddings; they differ only for cap2img, ``GroundedEncoder``)."""
    if space not in SPACES:
        raise ValueError(f"space: got {space!r}, expected one of {', '.join(SPACES)}")
    device = _device(models)
    size = batch_size or default_batch_size(device)
    order = torch.argsort(lengths, descending=True)
    dim = models[0].joint_dim if space == "joint" else models[0].embedding_dim
    out = torch.zeros(len(lengths), dim, device=device)
    for start in range(0, len(order), size):
        rows = order[start : start + size]
        width = int(lengths[rows[0]])
        batch = tokens[rows.to(tokens.device), :width].to(device).long()
        on_device = rows.to(device)
        for model in models:
            encoder = model.eval().caption_encoder
            with _autocast(device, precision):
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
    tokens, lengths = encoding.encode(list(sentences))
    return embed_captions(
        models,
        torch.from_numpy(tokens),
        torch.from_numpy(lengths),
        batch_size=batch_size,
        precision=precision,
        space=space,
    )
