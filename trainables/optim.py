"""The optimiser step of every trial, lone or fused (``trainables._training``,
``trainables.fused``): Adam with each member's own learning rate, and, for fused
members, gradient-norm clipping by each member's own norm.

A lone trial's parameters are its model's own; fused members' are stacked ``(k, ...)``
with a leading member dimension. Adam is elementwise, so one update over stacked
parameters with a ``(k,)`` learning rate is every member's own Adam step. The operations
and their order are ``torch.optim.Adam``'s (its default, non-capturable path: betas (0.9,
0.999), eps 1e-8, no weight decay), written with torch's ``_foreach`` kernels as its
multi-tensor path is, so a lone trial's update is ``torch.optim.Adam``'s exactly and a
member's is its lone trial's up to rounding (tests/trainables/test_optim.py). Not
``torch.optim.Adam`` itself: its learning rate is one per parameter group, a member's
parameters are a slice of a stacked tensor, not parameters of their own, and building one
imports ``torch._dynamo`` (about a CPU-second in every trial process). Its checkpoint is
``torch.optim.Adam``'s ``state_dict``, so checkpoints written with it before load as they
were. Clipping follows ``torch.nn.utils.clip_grad_norm_``: the norm of the parameters'
norms, ``limit / (norm + 1e-6)`` clamped at 1 (a lone trial clips with torch's own).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch
from torch import nn

__all__ = ["GroupAdam", "clip_per_member"]

Moments = Mapping[str, tuple[torch.Tensor, torch.Tensor]]


def _member_view(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``(k,)`` ``values`` shaped to broadcast over ``like`` ``(k, ...)``."""
    return values.to(like.device, like.dtype).view(-1, *([1] * (like.dim() - 1)))


@torch.no_grad()
def clip_per_member(parameters: Sequence[nn.Parameter], limits: torch.Tensor) -> torch.Tensor:
    """Scale each member's gradients of stacked ``parameters`` so that their joint norm
    is at most its ``limits`` entry (0: no clipping for that member); the ``(k,)`` norms
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


def _step_dtype() -> torch.dtype:
    """The dtype of ``torch.optim.Adam``'s step counts (float64 under a float64 default)."""
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32


class GroupAdam:
    """Adam over ``parameters`` (by name; those that require a gradient are trained):
    a lone model's, stepped at one learning rate, or k members' stacked ``(k, ...)``
    ones, member m at ``lr[m]`` (``step``'s argument). ``keep`` drops stacked members
    with the parameters'."""

    betas = (0.9, 0.999)  # torch.optim.Adam's defaults
    eps = 1e-8

    def __init__(self, parameters: Mapping[str, nn.Parameter], *, lr: float = 0.0) -> None:
        self.lr: float | torch.Tensor = lr  # the last step's (kept in the checkpoint)
        self.steps = 0
        self._set(parameters)

    def _set(self, parameters: Mapping[str, nn.Parameter]) -> None:
        self.parameters = dict(parameters)
        trained = {n: p for n, p in self.parameters.items() if p.requires_grad}
        self.exp_avg = {n: torch.zeros_like(p) for n, p in trained.items()}
        self.exp_avg_sq = {n: torch.zeros_like(p) for n, p in trained.items()}

    def zero_grad(self) -> None:
        for p in self.parameters.values():
            p.grad = None

    @torch.no_grad()
    def step(self, lr: float | torch.Tensor) -> None:
        """One Adam step at ``lr``: one learning rate, or one per stacked member ``(k,)``.
        A parameter without a gradient is left as it is (as ``torch.optim.Adam`` leaves
        it), yet counted."""
        beta1, beta2 = self.betas
        self.steps += 1
        self.lr = lr
        live = [n for n in self.exp_avg if self.parameters[n].grad is not None]
        if not live:
            return
        correction1 = 1 - beta1**self.steps
        correction2_sqrt = (1 - beta2**self.steps) ** 0.5
        step_size: float | torch.Tensor = (lr / correction1) * -1  # as Adam's
        if isinstance(step_size, torch.Tensor):  # one per member: on the device once
            step_size = step_size.to(self.parameters[live[0]].device, torch.float64)
        # as torch's default: all parameters at once on a GPU (few kernel launches), one
        # after the other on the CPU (each one's moments still in cache for its update)
        on_gpu = self.parameters[live[0]].device.type != "cpu"
        for names in [live] if on_gpu else [[n] for n in live]:
            params: list[torch.Tensor] = [self.parameters[n] for n in names]
            grads = [cast(torch.Tensor, p.grad) for p in params]  # live: each has one
            exp_avg = [self.exp_avg[n] for n in names]
            exp_avg_sq = [self.exp_avg_sq[n] for n in names]
            torch._foreach_lerp_(exp_avg, grads, 1 - beta1)
            torch._foreach_mul_(exp_avg_sq, beta2)
            torch._foreach_addcmul_(exp_avg_sq, grads, grads, 1 - beta2)
            denom = torch._foreach_sqrt(exp_avg_sq)
            torch._foreach_div_(denom, correction2_sqrt)
            torch._foreach_add_(denom, self.eps)
            if isinstance(step_size, torch.Tensor):  # addcdiv's (value * m) / denom
                scaled = [
                    _member_view(step_size, p) * m for p, m in zip(params, exp_avg, strict=True)
                ]
                torch._foreach_addcdiv_(params, scaled, denom)
            else:
                torch._foreach_addcdiv_(params, exp_avg, denom, step_size)

    def moments(self, member: int | None = None) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Copies of the moments ``(exp_avg, exp_avg_sq)`` by parameter name: all of
        them, or the stacked member at position ``member``'s."""

        def pick(t: torch.Tensor) -> torch.Tensor:
            return (t if member is None else t[member]).clone()

        return {n: (pick(self.exp_avg[n]), pick(self.exp_avg_sq[n])) for n in self.exp_avg}

    @torch.no_grad()
    def load_moments(self, moments: Moments | None, member: int | None = None) -> None:
        """Set the moments (``moments``' form; a name it lacks, or None: zero, as before a
        first step): all of them, or the stacked member at position ``member``'s."""
        for name in self.exp_avg:
            given = (moments or {}).get(name)
            for i, mine in enumerate((self.exp_avg[name], self.exp_avg_sq[name])):
                target = mine if member is None else mine[member]
                if given is None:
                    target.zero_()
                elif given[i].shape != target.shape:  # copy_ would broadcast a smaller one
                    raise ValueError(f"{name}: moments of shape {tuple(given[i].shape)}, "
                                     f"expected {tuple(target.shape)}")  # fmt: skip
                else:
                    target.copy_(given[i])

    def keep(self, parameters: Mapping[str, nn.Parameter], members: Sequence[int]) -> None:
        """Follow ``FusedEncoder.keep``: the new ``parameters`` of the members kept, at
        their old positions ``members``, with their moments."""
        index = torch.as_tensor(list(members), dtype=torch.long)
        exp_avg, exp_avg_sq = self.exp_avg, self.exp_avg_sq
        self._set(parameters)
        for name in self.exp_avg:
            self.exp_avg[name] = exp_avg[name][index.to(exp_avg[name].device)].clone()
            self.exp_avg_sq[name] = exp_avg_sq[name][index.to(exp_avg_sq[name].device)].clone()

    # -- checkpoints: torch.optim.Adam's state_dict -------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.Adam``'s ``state_dict`` of these parameters (indexed in their
        order): the moments and step count of each trained one after a first step."""
        state = {}
        for index, name in enumerate(self.parameters):
            if self.steps and name in self.exp_avg:
                state[index] = {
                    "step": torch.tensor(float(self.steps), dtype=_step_dtype()),
                    "exp_avg": self.exp_avg[name],
                    "exp_avg_sq": self.exp_avg_sq[name],
                }
        lr = self.lr.tolist() if isinstance(self.lr, torch.Tensor) else float(self.lr)
        group = {"lr": lr, "betas": self.betas, "eps": self.eps, "weight_decay": 0.0,
                 "amsgrad": False, "params": list(range(len(self.parameters)))}  # fmt: skip
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state_dict()``'s dictionary (or ``torch.optim.Adam``'s of the
        same parameters); a ``ValueError`` when it does not fit them."""
        (group,) = state["param_groups"]
        if len(group["params"]) != len(self.parameters):
            raise ValueError(
                f"the optimiser state holds {len(group['params'])} parameters, "
                f"the model {len(self.parameters)}"
            )
        entries = {int(index): entry for index, entry in state["state"].items()}
        counts = sorted({int(entry["step"]) for entry in entries.values()})
        if len(counts) > 1:
            raise ValueError(f"the optimiser state's step counts differ: {counts}")
        names = list(self.parameters)
        self.load_moments({names[i]: (e["exp_avg"], e["exp_avg_sq"]) for i, e in entries.items()})
        self.steps = counts[0] if counts else 0
        self.lr = group["lr"]
