"""The word-level pieces of the caption encoders: the word embedding (learned, or
initialised from pretrained vectors, optionally frozen behind a learned linear map as in
GroundSent), and VETE's bag-of-words encoder.

VETE-BOW (Kurach et al. 2017): the sentence embedding is the L2-normalised sum of its
word embeddings (``bow_pooling="sum"``) or their mean (``"mean"``, over the caption's
words, padding excluded). A mean is the sum divided by a positive number, so after the
normalisation both are the same embedding up to rounding, and train alike: the paper's
Table 3 lists both (0.860 / 0.861), a difference that cannot come from the pooling
itself. The setting is kept to reproduce that ablation, not as a dimension worth
searching.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trainables.config import ModelConfig
from trainables.vocabulary import PAD_INDEX, Tokenizer
from trainables.word_vectors import PretrainedVectors

__all__ = ["BagOfWordsEncoder", "WordEmbedding"]


class WordEmbedding(nn.Module):
    """A word family's word indices (``tokenizer``'s) -> ``word_embedding_dim`` vectors.
    ``table`` (row 0, padding, stays zero) starts random (N(0, 1), torch's default) and
    takes the ``pretrained`` vectors of the words that have them. With
    ``word_vectors_update="frozen_map"`` the table is fixed and ``map``, a learned square
    linear map without bias (He-initialised, as GroundSent's layers), follows it."""

    def __init__(
        self, config: ModelConfig, tokenizer: Tokenizer, pretrained: PretrainedVectors | None
    ) -> None:
        super().__init__()
        size, dim = tokenizer.size, config.word_embedding_dim
        self.table = nn.Embedding(size, dim, padding_idx=PAD_INDEX)
        if pretrained is not None:
            if pretrained.vectors.shape != (size, dim):
                raise ValueError(
                    f"word_vectors: {pretrained.vectors.shape[1]}-d vectors for "
                    f"{pretrained.vectors.shape[0]} indices, expected {dim}-d for {size}"
                )
            rows = torch.from_numpy(pretrained.found)
            with torch.no_grad():
                self.table.weight[rows] = torch.from_numpy(pretrained.vectors[pretrained.found])
        self.map: nn.Linear | None = None
        if config.word_vectors_update == "frozen_map":
            self.table.weight.requires_grad_(False)
            self.map = nn.Linear(dim, dim, bias=False)
            nn.init.kaiming_normal_(self.map.weight)

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        vectors = self.table(indices)
        return vectors if self.map is None else self.map(vectors)


class BagOfWordsEncoder(nn.Module):
    """VETE-BOW (module docstring): ``(B, word_embedding_dim)`` normalised embeddings."""

    def __init__(
        self, config: ModelConfig, tokenizer: Tokenizer, pretrained: PretrainedVectors | None
    ) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self.embedding = WordEmbedding(config, tokenizer, pretrained)
        self.pooling = config.bow_pooling

    def forward(self, words: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``words``: (B, T) indices on the model's device; ``lengths`` (B,) are not
        needed (padding is index 0), taken for the same call as the RNN encoders."""
        mask = (words != PAD_INDEX).unsqueeze(-1)
        summed = (self.embedding(words) * mask).sum(dim=1)
        if self.pooling == "mean":
            summed = summed / mask.sum(dim=1).clamp(min=1)
        return F.normalize(summed, dim=-1)

    def sentence(self, words: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The sentence embeddings: the joint ones (``forward``)."""
        return self(words, lengths)

    def encode(
        self, words: torch.Tensor, lengths: torch.Tensor, *, penalty: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The embeddings, and no attention penalty (a bag of words has no attention)."""
        return self(words, lengths), None
