"""The caption encoders that read a sentence off an RNN's final state: VETE-RNN and
GroundSent's Cap2Img.

``vete_rnn`` (Kurach et al. 2017, section 3): word embeddings -> a stacked GRU/LSTM
(``rnn_layers`` layers, one direction, ``hidden_size`` units) -> the last layer's final
hidden state, L2-normalised. The image side is VETE's affine map of the CNN feature (our
``ImageEncoder``); the sentence and joint embeddings are the same vector.

``cap2img`` (Kiela et al. 2018, sections 3.1-3.2): word embeddings (GloVe behind a
learned linear map in the paper: ``word_vectors`` with ``word_vectors_update=frozen_map``)
-> a one-layer BiLSTM -> ``h_T = max(h_T^forward, h_T^backward)`` element-wise (the
sentence embedding, ``hidden_size`` dimensions) -> dropout -> one projection with an ELU
``psi(P h_T)`` into the image-feature space, where the caption is compared by cosine
with the image's own CNN feature (no image-side parameters: ``FeatureImageEncoder``).
Recurrent weights start orthogonal and the projection He-initialised, as the paper's
section 4 says. The paper says "a series of projections" without their number; we use
one, and put its dropout (0.5, a number the paper gives without its place) on ``h_T``.

The final states come from torch's ``nn.GRU``/``nn.LSTM`` on a packed batch (cuDNN on a
GPU), so padding never reaches them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from trainables.config import ModelConfig
from trainables.vocabulary import Tokenizer
from trainables.word_encoders import WordEmbedding
from trainables.word_vectors import PretrainedVectors

__all__ = ["FeatureImageEncoder", "FinalStateEncoder", "final_states"]


def final_states(
    rnn: nn.GRU | nn.LSTM, embedded: torch.Tensor, lengths: torch.Tensor
) -> torch.Tensor:
    """The last layer's final hidden state of each caption: ``(B, n)``, or ``(B, 2, n)``
    (forward, backward) for a bidirectional ``rnn``; ``embedded`` is ``(B, T, d)``
    batch-first, ``lengths`` (B,) on the CPU."""
    packed = pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
    _, hidden = rnn(packed)
    if isinstance(hidden, tuple):  # an LSTM's (h, c)
        hidden = hidden[0]
    # (layers x directions, B, n), back in the batch's order (enforce_sorted=False)
    if rnn.bidirectional:
        return hidden[-2:].transpose(0, 1)
    return hidden[-1]


class FinalStateEncoder(nn.Module):
    """``vete_rnn`` and ``cap2img`` (module docstring). ``forward`` gives the joint
    embedding (compared with images), ``sentence`` the sentence embedding."""

    def __init__(
        self,
        config: ModelConfig,
        tokenizer: Tokenizer,
        pretrained: PretrainedVectors | None,
        feature_dim: int,
    ) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self.embedding = WordEmbedding(config, tokenizer, pretrained)
        grounded = config.encoder == "cap2img"
        rnn_class = nn.GRU if config.rnn_type == "gru" else nn.LSTM
        self.rnn = rnn_class(
            config.word_embedding_dim,
            config.hidden_size,
            num_layers=config.rnn_layers,
            batch_first=True,
            bidirectional=grounded,
        )
        self.projection: nn.Linear | None = None
        self.dropout = nn.Dropout(config.dropout)
        if grounded:
            for name, weight in self.rnn.named_parameters():
                if name.startswith("weight_hh"):
                    _orthogonal_gates(weight, config.hidden_size)
            self.projection = nn.Linear(config.hidden_size, feature_dim)
            nn.init.kaiming_normal_(self.projection.weight)
            nn.init.zeros_(self.projection.bias)

    def sentence(self, words: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``(B, n)`` L2-normalised sentence embeddings: the final state (vete_rnn) or
        the element-wise max of the two directions' final states (cap2img)."""
        return F.normalize(self._encoding(words, lengths), dim=-1)

    def forward(self, words: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``(B, joint)`` L2-normalised joint embeddings: the sentence embedding
        (vete_rnn) or its projection into the image-feature space (cap2img)."""
        encoding = self._encoding(words, lengths)
        if self.projection is not None:
            encoding = F.elu(self.projection(self.dropout(encoding)))
        return F.normalize(encoding, dim=-1)

    def encode(
        self, words: torch.Tensor, lengths: torch.Tensor, *, penalty: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The joint embeddings, and no attention penalty (there is no attention)."""
        return self(words, lengths), None

    def _encoding(self, words: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        states = final_states(self.rnn, self.embedding(words), lengths)
        return states.amax(dim=1) if self.rnn.bidirectional else states


def _orthogonal_gates(weight: torch.Tensor, hidden: int) -> None:
    """Each gate's ``(n, n)`` recurrent block of a ``weight_hh`` orthogonal (Saxe et al.,
    as GroundSent initialised its recurrent layers)."""
    with torch.no_grad():
        for block in weight.split(hidden, dim=0):
            nn.init.orthogonal_(block)


class FeatureImageEncoder(nn.Module):
    """Cap2Img's image side: the CNN feature itself, L2-normalised (the caption is
    projected into its space; nothing is learned here)."""

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return F.normalize(features, dim=-1)
