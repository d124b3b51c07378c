"""The visually grounded sentence encoder of Merkx & Frank (2019), SPEC section 1.

Caption encoder: characters -> 20-d embedding -> one bidirectional GRU/LSTM layer
(n units per direction) -> vectorial attention or max pooling, both masked over the
padding -> L2 normalisation. Image encoder: one linear layer from the CNN feature to 2n
-> L2 normalisation. Variable-length batches run as packed sequences (cuDNN on GPU).
"""

from __future__ import annotations

import string
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from trainables._packed_rnn import packed_bidirectional
from trainables.config import TrainConfig

__all__ = [
    "ALPHABET",
    "PAD_INDEX",
    "UNKNOWN_INDEX",
    "VOCAB_SIZE",
    "CaptionEncoder",
    "CharEncoding",
    "GroundedEncoder",
    "ImageEncoder",
    "VectorialAttention",
]


ALPHABET = string.printable  # the 100 printable ASCII characters, stored with the model
PAD_INDEX = 0  # padding (never a character: the authors' code mapped '0' here; we don't)
UNKNOWN_INDEX = len(ALPHABET) + 1  # any character outside ALPHABET
VOCAB_SIZE = len(ALPHABET) + 2


class CharEncoding:
    """Maps captions to padded character indices (vectorised); counts unknown characters."""

    def __init__(self, alphabet: str = ALPHABET) -> None:
        if len(alphabet) + 2 > 256:
            raise ValueError(f"alphabet: {len(alphabet)} symbols, at most 254 fit uint8 indices")
        self.alphabet = alphabet
        self.unknown_index = len(alphabet) + 1
        self._table = np.full(max(map(ord, alphabet)) + 1, self.unknown_index, dtype=np.uint8)
        self._table[[ord(ch) for ch in alphabet]] = np.arange(1, len(alphabet) + 1)
        self.unknown_count = 0  # characters mapped to unknown_index so far

    def encode(self, captions: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(indices (B, T) uint8, lengths (B,) int64)``; T is the longest caption. An
        empty caption becomes one unknown symbol, so the RNN has a step to run."""
        captions = [c if c else "\x00" for c in captions]
        lengths = np.fromiter(map(len, captions), dtype=np.int64, count=len(captions))
        points = np.frombuffer("".join(captions).encode("utf-32-le"), dtype=np.uint32)
        known = points < len(self._table)
        codes = np.where(known, self._table[np.where(known, points, 0)], self.unknown_index)
        self.unknown_count += int((codes == self.unknown_index).sum())
        width = int(lengths.max()) if len(captions) else 1
        out = np.zeros((len(captions), width), dtype=np.uint8)
        out[np.arange(width) < lengths[:, None]] = codes
        return out, lengths


class VectorialAttention(nn.Module):
    """``a_t = softmax_t(V tanh(W h_t + b_w) + b_v)``, one weight per feature and time
    step; ``sum_t a_t * h_t``. Padded steps get zero weight."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.hidden = nn.Linear(dim, hidden)
        self.out = nn.Linear(hidden, dim)

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        scores = self.out(torch.tanh(self.hidden(states)))  # (B, T, 2n)
        scores = scores.masked_fill(~mask.unsqueeze(-1), float("-inf"))
        weights = torch.softmax(scores, dim=1)
        return (weights * states).sum(dim=1)


class CaptionEncoder(nn.Module):
    def __init__(self, config: TrainConfig) -> None:
        super().__init__()
        self.alphabet = ALPHABET
        self.embedding = nn.Embedding(VOCAB_SIZE, config.char_embedding_dim, padding_idx=PAD_INDEX)
        rnn_class = nn.GRU if config.rnn_type == "gru" else nn.LSTM
        self.rnn = rnn_class(
            config.char_embedding_dim,
            config.hidden_size,
            num_layers=1,
            batch_first=True,
            bidirectional=True,
        )
        self.pooling = config.pooling
        self.attention = (
            VectorialAttention(config.embedding_dim, config.attention_hidden)
            if config.pooling == "attention"
            else None
        )

    def forward(self, chars: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``chars``: (B, T) indices on the model's device; ``lengths``: (B,) on the CPU
        (packing needs them there; keeping them there avoids a device sync)."""
        embedded = self.embedding(chars)
        packed = pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
        if _hand_written_backward(chars):
            data = packed_bidirectional(packed.data, packed.batch_sizes, self.rnn)
            packed_states = PackedSequence(
                data, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices
            )
        else:
            packed_states, _ = self.rnn(packed)
        states, _ = pad_packed_sequence(
            packed_states, batch_first=True, total_length=chars.shape[1]
        )
        mask = chars != PAD_INDEX
        if self.attention is not None:
            pooled = self.attention(states, mask)
        else:
            pooled = states.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(dim=1)
        return F.normalize(pooled, dim=-1)


def _hand_written_backward(chars: torch.Tensor) -> bool:
    """Train on the CPU through ``packed_bidirectional``: the same parameters and
    equations as ``nn.GRU``/``nn.LSTM``, with a forward and backward 1.6-3.1x faster
    than their CPU kernels (see BENCHMARKS.md). Inference, autocast and GPUs (cuDNN) keep
    torch's modules."""
    return (
        chars.device.type == "cpu"
        and torch.is_grad_enabled()
        and not torch.is_autocast_enabled("cpu")
    )


class ImageEncoder(nn.Module):
    def __init__(self, feature_dim: int, embedding_dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(feature_dim, embedding_dim)
        nn.init.xavier_uniform_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.linear(features), dim=-1)


class GroundedEncoder(nn.Module):
    """Both encoders; ``forward`` embeds a batch of image features and captions."""

    def __init__(self, config: TrainConfig, feature_dim: int = 2048) -> None:
        super().__init__()
        self.embedding_dim = config.embedding_dim  # both sides: 2n
        self.image_encoder = ImageEncoder(feature_dim, config.embedding_dim)
        self.caption_encoder = CaptionEncoder(config)

    def forward(
        self, features: torch.Tensor, chars: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.image_encoder(features), self.caption_encoder(chars, lengths)
