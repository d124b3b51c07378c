"""Training objectives (docs/protocols.md section 2), as small modules over a batch of embeddings.

``S = images @ captions.T`` holds the cosine similarities (both sides are normalised);
row i is image i, column j caption j, and pair (i, i) matches.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

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

    One trial's embeddings are ``(B, E)`` and its loss a scalar. A group of k members
    trained at once (``trainables.fused``) gives ``(k, B, E)`` embeddings and one
    ``margin``, ``reduction`` and ``negatives`` per member (sequences of k): the ``(k,)``
    losses, each its member's alone.
    """

    margin: torch.Tensor  # buffers, one value or one per member
    mean: torch.Tensor
    hardest: torch.Tensor

    def __init__(
        self,
        margin: float | Sequence[float],
        reduction: str | Sequence[str] = "sum",
        negatives: str | Sequence[str] = "all",
    ) -> None:
        super().__init__()
        # buffers, so that they follow the embeddings' device once (``forward``)
        self.register_buffer("margin", torch.tensor(margin, dtype=torch.float64))
        self.register_buffer("mean", _is(reduction, "mean"))
        self.register_buffer("hardest", _is(negatives, "hardest"))

    def forward(self, images: torch.Tensor, captions: torch.Tensor) -> torch.Tensor:
        if self.margin.device != images.device:
            self.to(images.device)
        scores = images @ captions.transpose(-2, -1)  # (..., B, B)
        b = scores.shape[-1]
        positive = scores.diagonal(dim1=-2, dim2=-1)  # (..., B)
        margin = self.margin.to(scores.dtype)[..., None, None]
        off_diagonal = ~torch.eye(b, dtype=torch.bool, device=scores.device)
        caption_query = (margin + scores - positive.unsqueeze(-2)).clamp(min=0) * off_diagonal
        image_query = (margin + scores - positive.unsqueeze(-1)).clamp(min=0) * off_diagonal
        every = caption_query.sum(dim=(-2, -1)) + image_query.sum(dim=(-2, -1))
        hardest = caption_query.amax(dim=-2).sum(dim=-1) + image_query.amax(dim=-1).sum(dim=-1)
        total = torch.where(self.hardest, hardest, every)
        return total / torch.where(self.mean, float(b * b), 1.0).to(total.dtype)


def _is(values: str | Sequence[str], value: str) -> torch.Tensor:
    """Whether ``values`` (one, or one per member) are ``value``, as a bool tensor."""
    if isinstance(values, str):
        return torch.tensor(values == value)
    return torch.tensor([v == value for v in values])


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


# HingeLoss's arguments, each the LossConfig field of the same name: a new one is read
# from every config without another edit
_HINGE_FIELDS = tuple(inspect.signature(HingeLoss).parameters)


def make_loss(config: LossConfig | Sequence[LossConfig]) -> nn.Module:
    """The objective of one config, or (a sequence of k) the hinge losses of a fused
    group's members: ``(k,)`` losses, each with its member's own values."""
    if isinstance(config, LossConfig):
        if config.loss == "pearson":
            return PearsonLoss()
        return HingeLoss(**{name: getattr(config, name) for name in _HINGE_FIELDS})
    if not config or any(member.loss != "hinge" for member in config):
        raise ValueError("a fused group trains the hinge loss only, one member or more")
    return HingeLoss(**{name: [getattr(m, name) for m in config] for name in _HINGE_FIELDS})
