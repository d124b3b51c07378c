"""The visually grounded sentence encoder of Merkx & Frank (2019), docs/protocols.md section 1, and
the other caption encoder families of ``ModelConfig.encoder`` (README "Encoder families").

Caption encoder (``char_rnn``, the paper's): characters -> 20-d embedding -> one
bidirectional GRU/LSTM layer (n units per direction) -> vectorial attention (one head or
several, ``trainables.attention``) or max pooling, both masked over the padding -> L2
normalisation. ``word_rnn`` is the same encoder over word embeddings (the authors'
``flickr_words`` model); ``word_bow`` is VETE's bag of words
(``trainables.word_encoders``); ``vete_rnn`` and ``cap2img`` read the final state of an
RNN (``trainables.final_state``). Image encoder: one linear layer from the CNN feature to
the caption embedding's size -> L2 normalisation (cap2img: the CNN feature itself).
Variable-length batches run as packed sequences (cuDNN on GPU; the hand-written
recurrence when training on a CPU). On the CPU, inference can skip the padding altogether
(``CaptionEncoder.encode_packed``: the training recurrence on captions packed once, the
attention or max pooling on the packed rows), which ``trainables.embedding`` uses.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

from trainables._packed_rnn import packed_bidirectional
from trainables.attention import MultiHeadVectorialAttention, VectorialAttention
from trainables.config import ModelConfig
from trainables.final_state import FeatureImageEncoder, FinalStateEncoder
from trainables.vocabulary import Tokenizer
from trainables.word_encoders import BagOfWordsEncoder, WordEmbedding
from trainables.word_vectors import PretrainedVectors

__all__ = [
    "ALPHABET",
    "PAD_INDEX",
    "UNKNOWN_INDEX",
    "CaptionEncoder",
    "CharEncoding",
    "GroundedEncoder",
    "ImageEncoder",
    "MultiHeadVectorialAttention",
    "PackedCaptions",
    "VectorialAttention",
    "padded",
]


ALPHABET = string.printable  # the 100 printable ASCII characters, stored with the model
PAD_INDEX = 0  # padding (never a character: the authors' code mapped '0' here; we don't)
UNKNOWN_INDEX = len(ALPHABET) + 1  # any character outside ALPHABET


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

    @property
    def size(self) -> int:
        """Indices in all: the characters, padding and unknown."""
        return len(self.alphabet) + 2

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


@dataclass(frozen=True)
class PackedCaptions:
    """Captions packed time-major without any padding, longest first: the rows of step t
    are the first ``batch_sizes[t]`` captions (those longer than t), as a
    ``PackedSequence`` of sorted captions holds them. Depends only on the captions, so a
    fixed set is packed once (``trainables.embedding`` keeps the packing)."""

    tokens: torch.Tensor  # (sum of lengths,) indices as the captions held them, step by step
    batch_sizes: torch.Tensor  # (longest length,) int64, on the CPU
    slots: torch.Tensor  # (sum of lengths,) int32: the caption of each row (0 = the longest)

    @classmethod
    def of(cls, tokens: torch.Tensor, lengths: torch.Tensor) -> PackedCaptions:
        """``tokens`` (B, T >= lengths[0]) of captions sorted longest first (``lengths``
        (B,), non-increasing, each at least 1, on the CPU)."""
        if len(lengths) == 0 or bool((lengths[1:] > lengths[:-1]).any()) or int(lengths[-1]) < 1:
            raise ValueError("lengths: expected a non-empty, non-increasing batch, each >= 1")
        width = int(lengths[0])
        mask = torch.arange(width)[:, None] < lengths[None, :]  # (T, B): step t of caption b
        packed = tokens[:, :width].t()[mask.to(tokens.device)]
        slots = torch.arange(len(lengths), dtype=torch.int32).expand(width, -1)[mask]
        return cls(packed, mask.sum(dim=1), slots.to(tokens.device))

    @property
    def count(self) -> int:
        """The captions packed."""
        return int(self.batch_sizes[0])


class CaptionEncoder(nn.Module):
    """The RNN families (``char_rnn``, ``word_rnn``): embedding -> BiGRU/BiLSTM -> masked
    attention or max pooling -> L2 normalisation. ``tokenizer`` is the model's input
    (default: the character alphabet); a word model needs its vocabulary, and takes
    ``pretrained`` vectors for its word embedding."""

    def __init__(
        self,
        config: ModelConfig,
        tokenizer: Tokenizer | None = None,
        pretrained: PretrainedVectors | None = None,
    ) -> None:
        super().__init__()
        self.embedding: nn.Module
        if config.encoder == "char_rnn":
            self.tokenizer: Tokenizer = tokenizer if tokenizer is not None else CharEncoding()
            self.alphabet = getattr(self.tokenizer, "alphabet", ALPHABET)
            self.embedding = nn.Embedding(
                self.tokenizer.size, config.char_embedding_dim, padding_idx=PAD_INDEX
            )
            input_dim = config.char_embedding_dim
        else:
            self.tokenizer = _required(tokenizer, config)
            self.embedding = WordEmbedding(config, self.tokenizer, pretrained)
            input_dim = config.word_embedding_dim
        rnn_class = nn.GRU if config.rnn_type == "gru" else nn.LSTM
        self.rnn = rnn_class(
            input_dim, config.hidden_size, num_layers=1, batch_first=True, bidirectional=True
        )
        self.pooling = config.pooling
        self.attention: VectorialAttention | MultiHeadVectorialAttention | None = None
        if config.pooling == "attention" and config.attention_heads == 1:
            self.attention = VectorialAttention(2 * config.hidden_size, config.attention_hidden)
        elif config.pooling == "attention":
            self.attention = MultiHeadVectorialAttention(
                2 * config.hidden_size, config.attention_hidden, config.attention_heads
            )

    def forward(self, chars: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``chars``: (B, T) indices (characters or words) on the model's device;
        ``lengths``: (B,) on the CPU (packing needs them there; keeping them there avoids a
        device sync)."""
        return self.encode(chars, lengths)[0]

    def sentence(self, chars: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The sentence embeddings: the joint ones (``forward``)."""
        return self(chars, lengths)

    def encode(
        self, chars: torch.Tensor, lengths: torch.Tensor, *, penalty: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The normalised embeddings, and with ``penalty`` and several attention heads
        their diversity penalty (``trainables.attention``; None otherwise)."""
        states = self._states(chars, lengths)
        mask = chars != PAD_INDEX
        if isinstance(self.attention, MultiHeadVectorialAttention):
            pooled, weights = self.attention.pool(states, mask)
            embedding = F.normalize(pooled, dim=-1)
            return embedding, self.attention.penalty(weights, embedding) if penalty else None
        if self.attention is not None:
            pooled = self.attention(states, mask)
        else:
            pooled = states.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(dim=1)
        return F.normalize(pooled, dim=-1), None

    def encode_packed(self, captions: PackedCaptions) -> torch.Tensor:
        """``forward``'s normalised embeddings ``(B, dim)`` of ``captions`` (longest first),
        computed without padding: the training recurrence (``packed_bidirectional``) on
        the packed rows, then the attention's softmax over each caption's steps (or their
        maximum) as sums over the rows of each caption. The same values as ``forward`` up
        to the order of the sums; no diversity penalty. For inference only (it works in
        place on what a gradient would need)."""
        states = packed_bidirectional(
            self.embedding(captions.tokens.long()), captions.batch_sizes, self.rnn
        )
        slots, count = captions.slots.long(), captions.count
        if isinstance(self.attention, MultiHeadVectorialAttention):
            heads = [cast(VectorialAttention, head) for head in self.attention.heads]
            pooled = torch.cat([_attend_packed(h, states, slots, count) for h in heads], dim=-1)
        elif self.attention is not None:
            pooled = _attend_packed(self.attention, states, slots, count)
        else:
            pooled = _per_caption(states, slots, count, "amax")
        return F.normalize(pooled, dim=-1)

    def _states(self, chars: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The RNN's outputs ``(B, T, 2n)``, zero on padded steps."""
        embedded = self.embedding(chars)
        packed = pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
        if _hand_written_backward(chars):
            # under autocast (precision "bf16"): the recurrent products in bfloat16, the
            # state in float32 (autocast would round it at every step)
            low = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None
            with torch.autocast("cpu", enabled=False):
                data = packed_bidirectional(packed.data, packed.batch_sizes, self.rnn, low=low)
            packed_states = PackedSequence(
                data, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices
            )
        else:
            packed_states, _ = self.rnn(packed)
        return padded(packed_states, chars.shape[1])


def _per_caption(rows: torch.Tensor, slots: torch.Tensor, count: int, how: str) -> torch.Tensor:
    """``(count, features)``: the packed ``rows`` reduced over each caption's rows
    (``slots``), by "sum" or "amax"."""
    if how == "sum":
        return rows.new_zeros(count, rows.shape[1]).index_add_(0, slots, rows)
    start = rows.new_full((count, rows.shape[1]), float("-inf"))
    return start.scatter_reduce_(0, slots[:, None].expand_as(rows), rows, how)


def _attend_packed(
    head: VectorialAttention, states: torch.Tensor, slots: torch.Tensor, count: int
) -> torch.Tensor:
    """``head(padded states, mask)`` on packed ``states``: ``sum_t a_t h_t`` with
    ``a_t = exp(s_t - max s) / sum_t exp(s_t - max s)`` over each caption's steps."""
    scores = head.out(head.hidden(states).tanh_())
    scores.sub_(_per_caption(scores, slots, count, "amax")[slots]).exp_()
    total = _per_caption(scores, slots, count, "sum")
    return _per_caption(scores.mul_(states), slots, count, "sum").div_(total)


def padded(packed: PackedSequence, total_length: int) -> torch.Tensor:
    """``pad_packed_sequence(packed, batch_first=True, total_length=...)[0]``: the packed
    rows ``(B, total_length, features)`` in the batch's own order, zero on padded steps,
    written by one index copy, whose backward is one gather. torch's own version slices
    the data once per run of steps with equal batch sizes, and each slice's backward
    writes a zero tensor the size of all the data: at n=1024 and batch 128 those zero
    fills and copies were 44% of a CPU training step (BENCHMARKS.md)."""
    data, sizes = packed.data, packed.batch_sizes  # batch_sizes: always on the CPU
    steps = torch.repeat_interleave(torch.arange(len(sizes)), sizes)
    slots = torch.arange(len(steps)) - (torch.cumsum(sizes, 0) - sizes)[steps]
    rows = slots.to(data.device)
    if packed.sorted_indices is not None:  # slot j of the sorted batch is caption sorted[j]
        rows = packed.sorted_indices[rows]
    rows = rows * total_length + steps.to(data.device)
    batch = int(sizes[0])
    out = data.new_zeros(batch * total_length, data.shape[1]).index_copy(0, rows, data)
    return out.view(batch, total_length, data.shape[1])


def _required(tokenizer: Tokenizer | None, config: ModelConfig) -> Tokenizer:
    if tokenizer is None:
        raise ValueError(
            f"encoder {config.encoder}: needs its vocabulary (trainables.families.build_tokenizer)"
        )
    return tokenizer


def _hand_written_backward(chars: torch.Tensor) -> bool:
    """Train on the CPU through ``packed_bidirectional``: the same parameters and
    equations as ``nn.GRU``/``nn.LSTM``, with a forward and backward 1.6-3.1x faster
    than their CPU kernels (see BENCHMARKS.md); under autocast with bfloat16 products.
    Inference and GPUs (cuDNN) keep torch's modules."""
    return chars.device.type == "cpu" and torch.is_grad_enabled()


class ImageEncoder(nn.Module):
    def __init__(self, feature_dim: int, embedding_dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(feature_dim, embedding_dim)
        nn.init.xavier_uniform_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.linear(features), dim=-1)


class GroundedEncoder(nn.Module):
    """Both encoders; ``forward`` embeds a batch of image features and captions into
    their joint space (``joint_dim``); ``caption_encoder.sentence`` gives the sentence
    embeddings (``embedding_dim``: the same vectors, except for cap2img, whose sentence
    embedding is the BiLSTM's encoding before its projection into the image space).
    ``tokenizer``: the captions' (default: the character alphabet; a word family's
    vocabulary is required); ``pretrained``: word vectors for a word family."""

    def __init__(
        self,
        config: ModelConfig,
        feature_dim: int = 2048,
        tokenizer: Tokenizer | None = None,
        pretrained: PretrainedVectors | None = None,
    ) -> None:
        super().__init__()
        self.embedding_dim = config.embedding_dim  # the sentence embeddings'
        grounded_in_features = config.encoder == "cap2img"
        self.joint_dim = feature_dim if grounded_in_features else config.embedding_dim
        self.image_encoder: ImageEncoder | FeatureImageEncoder
        if grounded_in_features:
            self.image_encoder = FeatureImageEncoder()
        else:
            self.image_encoder = ImageEncoder(feature_dim, config.embedding_dim)
        self.caption_encoder: CaptionEncoder | BagOfWordsEncoder | FinalStateEncoder
        if config.encoder == "word_bow":
            self.caption_encoder = BagOfWordsEncoder(
                config, _required(tokenizer, config), pretrained
            )
        elif config.encoder in ("vete_rnn", "cap2img"):
            self.caption_encoder = FinalStateEncoder(
                config, _required(tokenizer, config), pretrained, feature_dim
            )
        else:
            self.caption_encoder = CaptionEncoder(config, tokenizer, pretrained)

    def forward(
        self, features: torch.Tensor, chars: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.image_encoder(features), self.caption_encoder(chars, lengths)

    def forward_with_penalty(
        self, features: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``forward``, and the attention diversity penalty of the batch (0 without
        several attention heads)."""
        images = self.image_encoder(features)
        captions, penalty = self.caption_encoder.encode(tokens, lengths, penalty=True)
        return images, captions, penalty if penalty is not None else images.new_zeros(())
