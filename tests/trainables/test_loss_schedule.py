"""The losses against double-loop references, and the learning-rate schedule."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from trainables.loss import HingeLoss, PearsonLoss
from trainables.schedule import cyclic_cosine_lr


def reference_hinge(
    images: torch.Tensor, captions: torch.Tensor, margin: float, reduction: str, negatives: str
) -> float:
    n = len(images)
    s = [[float(images[i] @ captions[j]) for j in range(n)] for i in range(n)]
    total = 0.0
    for q in range(n):  # caption q as query: negatives are images i != q
        terms = [max(0.0, margin + s[i][q] - s[q][q]) for i in range(n) if i != q]
        total += max(terms) if negatives == "hardest" else sum(terms)
    for q in range(n):  # image q as query: negatives are captions j != q
        terms = [max(0.0, margin + s[q][j] - s[q][q]) for j in range(n) if j != q]
        total += max(terms) if negatives == "hardest" else sum(terms)
    return total / n**2 if reduction == "mean" else total


@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("negatives", ["all", "hardest"])
@pytest.mark.parametrize("margin", [0.0, 0.2, 0.5])
def test_hinge_matches_the_double_loop(reduction: str, negatives: str, margin: float) -> None:
    g = torch.Generator().manual_seed(3)
    images = F.normalize(torch.randn(7, 5, generator=g, dtype=torch.float64), dim=1)
    captions = F.normalize(torch.randn(7, 5, generator=g, dtype=torch.float64), dim=1)
    got = HingeLoss(margin, reduction, negatives)(images, captions)
    assert float(got) == pytest.approx(
        reference_hinge(images, captions, margin, reduction, negatives), rel=1e-12
    )


def test_hinge_of_a_group_is_each_members_own_loss() -> None:
    """k members at once, each with its own margin, reduction and negatives: the (k,)
    losses are each member's double loop."""
    g = torch.Generator().manual_seed(4)
    images = F.normalize(torch.randn(4, 6, 5, generator=g, dtype=torch.float64), dim=-1)
    captions = F.normalize(torch.randn(4, 6, 5, generator=g, dtype=torch.float64), dim=-1)
    margins, reductions, negatives = (
        [0.0, 0.2, 0.5, 0.3],
        ["sum", "mean", "sum", "mean"],
        ["all", "all", "hardest", "hardest"],
    )
    got = HingeLoss(margins, reductions, negatives)(images, captions)
    assert got.shape == (4,)
    for m in range(4):
        expected = reference_hinge(images[m], captions[m], margins[m], reductions[m], negatives[m])
        assert float(got[m]) == pytest.approx(expected, rel=1e-12)


def test_hinge_is_zero_when_matches_beat_every_negative_by_the_margin() -> None:
    eye = torch.eye(4, dtype=torch.float64)
    assert float(HingeLoss(0.5)(eye, eye)) == 0.0
    assert float(HingeLoss(1.5)(eye, eye)) == pytest.approx(2 * 12 * 0.5)


def test_pearson_loss_matches_its_definition() -> None:
    g = torch.Generator().manual_seed(0)
    images = F.normalize(torch.randn(6, 4, generator=g, dtype=torch.float64), dim=1)
    captions = F.normalize(torch.randn(6, 4, generator=g, dtype=torch.float64), dim=1)
    sims = [float(images[i] @ captions[i]) for i in range(6)]
    sims += [float(images[i] @ captions[(i - 1) % 6]) for i in range(6)]
    labels = [1.0] * 6 + [-1.0] * 6
    mx, my = sum(sims) / 12, sum(labels) / 12
    cov = sum((x - mx) * (y - my) for x, y in zip(sims, labels, strict=True))
    sx = math.sqrt(sum((x - mx) ** 2 for x in sims))
    sy = math.sqrt(sum((y - my) ** 2 for y in labels))
    assert float(PearsonLoss()(images, captions)) == pytest.approx(-cov / (sx * sy), rel=1e-12)


def test_cyclic_schedule_at_known_steps() -> None:
    lo, hi, cycle = 1e-6, 1e-3, 400  # 100 minibatches per epoch, a 4-epoch cycle
    assert cyclic_cosine_lr(0, cycle, lo, hi) == pytest.approx(lo)  # epoch 0: minimum
    assert cyclic_cosine_lr(100, cycle, lo, hi) == pytest.approx((lo + hi) / 2)  # epoch 1
    assert cyclic_cosine_lr(200, cycle, lo, hi) == pytest.approx(hi)  # epoch 2: maximum
    assert cyclic_cosine_lr(400, cycle, lo, hi) == pytest.approx(lo)  # epoch 4: minimum
    assert cyclic_cosine_lr(600, cycle, lo, hi) == pytest.approx(hi)  # epoch 6: maximum
    assert cyclic_cosine_lr(3200, cycle, lo, hi) == pytest.approx(lo)  # epoch 32
    assert cyclic_cosine_lr(50, cycle, lo, hi) == pytest.approx(
        lo + (hi - lo) * 0.5 * (1 + math.cos(math.pi * 1.25))
    )
