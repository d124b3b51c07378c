"""The optimiser side of fused training (``trainables.fused``), per member over stacked
parameters ``(k, ...)``: gradient-norm clipping by each member's own norm, and Adam with
each member's own learning rate.

Adam is elementwise, so one update over the stacked parameters with a ``(k,)`` learning
rate is every member's own Adam step; the operations and their order are
``torch.optim.Adam``'s (its default, non-capturable path, defaults betas (0.9, 0.999),
eps 1e-8, no weight decay), so a member's update is its lone trial's up to rounding.
Not ``torch.optim.Adam`` itself: its learning rate is one per parameter group, and a
member's parameters are a slice of a stacked tensor, not parameters of their own.
Clipping follows ``torch.nn.utils.clip_grad_norm_``: the norm of the parameters' norms,
``limit / (norm + 1e-6)`` clamped at 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["FusedAdam", "clip_per_member"]


def _member_view(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``(k,)`` ``values`` shaped to broadcast over ``like`` ``(k, ...)``."""
    return values.to(like.device, like.dtype).view(-1, *([1] * (like.dim() - 1)))


@torch.no_grad()
def clip_per_member(parameters: Sequence[nn.Parameter], limits: torch.Tensor) -> torch.Tensor:
    """Scale each member's gradients of ``parameters`` so that their joint norm is at
    most its ``limits`` entry (0: no clipping for that member); the ``(k,)`` norms
    before clipping."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return limits.new_zeros(limits.shape)
    norms = torch.stack([g.reshape(g.shape[0], -1).norm(dim=1) for g in grads])  # (P, k)
    total = norms.norm(dim=0)  # (k,)
    limits = limits.to(total.device, total.dtype)
    coef = torch.where(limits > 0, (limits / (total + 1e-6)).clamp(max=1.0), 1.0)
    for g in grads:
        g.mul_(_member_view(coef, g))
    return total


class FusedAdam:
    """Adam over stacked parameters, member m at learning rate ``lr[m]`` (set by
    ``step``'s argument); ``keep`` drops members with the parameters'."""

    def __init__(
        self,
        parameters: Sequence[nn.Parameter],
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        self.parameters = list(parameters)
        self.betas, self.eps = betas, eps
        self.steps = 0
        self.exp_avg = [torch.zeros_like(p) for p in self.parameters]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.parameters]

    def zero_grad(self) -> None:
        for p in self.parameters:
            p.grad = None

    @torch.no_grad()
    def step(self, lr: torch.Tensor) -> None:
        """One Adam step of every member, ``lr`` ``(k,)``. A parameter without a
        gradient is left as it is (as ``torch.optim.Adam`` leaves it), yet counted."""
        beta1, beta2 = self.betas
        self.steps += 1
        correction1 = 1 - beta1**self.steps
        correction2_sqrt = (1 - beta2**self.steps) ** 0.5
        step_size = -(lr.to(torch.float64) / correction1)  # as Adam's (lr / bc1) * -1
        for p, m, v in zip(self.parameters, self.exp_avg, self.exp_avg_sq, strict=True):
            if p.grad is None:
                continue
            m.lerp_(p.grad, 1 - beta1)
            v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            denom = (v.sqrt() / correction2_sqrt).add_(self.eps)
            p.add_(_member_view(step_size, p) * m / denom)  # addcdiv's (value * m) / denom

    def keep(self, parameters: Sequence[nn.Parameter], members: Sequence[int]) -> None:
        """Follow ``FusedEncoder.keep``: the new ``parameters`` of the members kept, at
        their old positions ``members``, with their moments."""
        index = torch.as_tensor(list(members), dtype=torch.long)
        self.parameters = list(parameters)
        self.exp_avg = [m[index.to(m.device)].clone() for m in self.exp_avg]
        self.exp_avg_sq = [v[index.to(v.device)].clone() for v in self.exp_avg_sq]
