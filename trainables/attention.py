"""Vectorial attention pooling (docs/protocols.md section 1), with one head or several, and the
attention diversity penalty of the authors' later code.

One head is the paper's model: ``a_t = softmax_t(V tanh(W h_t + b_w) + b_v)``, one weight
per feature and time step, ``sum_t a_t * h_t``; padded steps get zero weight. Several
heads, as the authors' ``multi_attention`` (``PyTorch/functions/costum_layers.py`` of
DannyMerkx/speech2image), are independent heads whose pooled vectors are
**concatenated**, so the caption embedding has ``heads x 2n`` dimensions (and the image
encoder maps to as many), L2-normalised as a whole.

The penalty is their ``attention_loss`` (``PyTorch/functions/costum_loss.py``), with
margin 1, summed over every pair of heads x < y:

- ``max(0, 1 - ||W_x - W_y||_F)``: the heads' first layers (``W``: 2n -> hidden);
- ``max(0, 1 - ||A_x - A_y||_F)``: the heads' attention weights ``(T, 2n)`` of a caption.
  Their code took the batch's first caption only; here the term is the mean over every
  caption of the batch (its expectation under their shuffled batches), so it does not
  depend on which caption comes first;
- ``max(0, 1 - ||E_x - E_y||_F)``: the heads' parts ``(B, 2n)`` of the normalised
  caption embeddings of the batch.

Each term is zero once its two heads are more than 1 apart: the penalty only pushes
heads apart while they are close. With padded steps masked, their weights are zero for
every head and add nothing to the distances.
"""

from __future__ import annotations

import itertools
from typing import cast

import torch
from torch import nn

__all__ = ["MultiHeadVectorialAttention", "VectorialAttention"]


class VectorialAttention(nn.Module):
    """``a_t = softmax_t(V tanh(W h_t + b_w) + b_v)``, one weight per feature and time
    step; ``sum_t a_t * h_t``. Padded steps get zero weight."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.hidden = nn.Linear(dim, hidden)
        self.out = nn.Linear(hidden, dim)

    def weights(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The attention weights ``(B, T, dim)``; zero on padded steps."""
        scores = self.out(torch.tanh(self.hidden(states)))  # (B, T, 2n)
        scores = scores.masked_fill(~mask.unsqueeze(-1), float("-inf"))
        return torch.softmax(scores, dim=1)

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return (self.weights(states, mask) * states).sum(dim=1)


class MultiHeadVectorialAttention(nn.Module):
    """Independent ``VectorialAttention`` heads; their pooled vectors concatenated."""

    def __init__(self, dim: int, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = nn.ModuleList(VectorialAttention(dim, hidden) for _ in range(heads))

    def _each(self) -> list[VectorialAttention]:
        return [cast(VectorialAttention, head) for head in self.heads]

    def pool(
        self, states: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``(B, heads x dim)`` pooled vectors, and each head's weights ``(B, T, dim)``."""
        weights = [head.weights(states, mask) for head in self._each()]
        pooled = torch.cat([(w * states).sum(dim=1) for w in weights], dim=-1)
        return pooled, weights

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.pool(states, mask)[0]

    def penalty(self, weights: list[torch.Tensor], embedding: torch.Tensor) -> torch.Tensor:
        """The diversity penalty of one batch, the sum over head pairs of the three hinge
        terms of the module docstring: ``weights`` as ``pool`` returns them, ``embedding``
        the normalised ``(B, heads x dim)`` embeddings."""
        first_layers = [head.hidden.weight for head in self._each()]
        parts = embedding.float().chunk(len(first_layers), dim=-1)
        total = embedding.new_zeros((), dtype=torch.float32)
        for x, y in itertools.combinations(range(len(first_layers)), 2):
            total = total + (1.0 - (first_layers[x] - first_layers[y]).norm()).clamp(min=0)
            per_caption = (weights[x].float() - weights[y].float()).flatten(1).norm(dim=1)
            total = total + (1.0 - per_caption).clamp(min=0).mean()
            total = total + (1.0 - (parts[x] - parts[y]).norm()).clamp(min=0)
        return total
