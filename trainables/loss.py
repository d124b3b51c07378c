"""Training objectives (docs/protocols.md section 2), as small modules over a batch of embeddings.

``S = images @ captions.T`` holds the cosine similarities (both sides are normalised);
row i is image i, column j caption j, and pair (i, i) matches.
"""

from __future__ import annotations

import torch
from torch import nn

from trainables.config import LossConfig

__all__ = [
    "HingeLoss",
    "PearsonLoss",
    "at_least_float32",
    "make_loss",
]


def at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """``x`` in the precision a loss is computed in: bf16 (autocast's output) cast up to
    float32, float32 and float64 as they are (a float64 run trains in float64 through)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


class HingeLoss(nn.Module):
    """The bidirectional hinge (triplet) loss with in-batch negatives.

    For every i != j: ``max(0, margin + S[i,j] - S[j,j])`` (caption j as the query,
    image i as its negative) plus ``max(0, margin + S[i,j] - S[i,i])`` (image i as the
    query, caption j as its negative). ``negatives="hardest"`` keeps only the largest
    term per query (VSE++). ``reduction="sum"`` is the paper's formula; ``"mean"``
    divides by B^2 as the authors' code did.
    """

    def __init__(self, margin: float, reduction: str = "sum", negatives: str = "all") -> None:
        super().__init__()
        self.margin = margin
        self.reduction = reduction
        self.negatives = negatives

    def forward(self, images: torch.Tensor, captions: torch.Tensor) -> torch.Tensor:
        scores = images @ captions.T
        positive = scores.diagonal()
        off_diagonal = ~torch.eye(len(scores), dtype=torch.bool, device=scores.device)
        caption_query = (self.margin + scores - positive.unsqueeze(0)).clamp(min=0)
        image_query = (self.margin + scores - positive.unsqueeze(1)).clamp(min=0)
        caption_query = caption_query * off_diagonal
        image_query = image_query * off_diagonal
        if self.negatives == "hardest":
            total = caption_query.amax(dim=0).sum() + image_query.amax(dim=1).sum()
        else:
            total = caption_query.sum() + image_query.sum()
        return total / len(scores) ** 2 if self.reduction == "mean" else total


class PearsonLoss(nn.Module):
    """VETE's objective (Kurach et al. 2017): minus the Pearson correlation between the
    similarities of the B matching pairs and of B mismatched pairs
    ``(image i, caption sigma(i))`` and the labels +1 / -1. ``sigma`` is a cyclic shift by
    one, a derangement, so no mismatched pair is accidentally a match."""

    def forward(self, images: torch.Tensor, captions: torch.Tensor) -> torch.Tensor:
        matching = (images * captions).sum(dim=-1)
        mismatched = (images * captions.roll(shifts=1, dims=0)).sum(dim=-1)
        similarities = torch.cat([matching, mismatched])
        labels = torch.cat([torch.ones_like(matching), -torch.ones_like(mismatched)])
        x = similarities - similarities.mean()
        y = labels - labels.mean()
        return -(x * y).sum() / (x.norm() * y.norm()).clamp(min=1e-12)


def make_loss(config: LossConfig) -> nn.Module:
    if config.loss == "pearson":
        return PearsonLoss()
    return HingeLoss(config.margin, config.reduction, config.negatives)
