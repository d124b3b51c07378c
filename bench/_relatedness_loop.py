"""The reference engine of SentEval's supervised relatedness protocol, kept to check and
time the library's batched one (``trainables._relatedness_batched``): one task at a time,
one 64-row step per Python iteration, as SentEval's own loop, with its own copy of the
initial weights and the expected score; each task's rounds are judged by the rule the
task carries (the library's, which test_relatedness holds to an nn.Linear + Adam
SentEval-style reference). ``fit_loop`` is a
``RelatednessProtocol(fit=...)``: tests/trainables/test_relatedness.py holds the two to
each other, bench/bench_eval.py times them side by side."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from trainables.relatedness import N_CLASSES, RelatednessProtocol

__all__ = ["fit_loop"]


def fit_loop(tasks: Sequence[Any], protocol: RelatednessProtocol) -> list[torch.Tensor]:
    """Each task's best weights, trained alone by the reference engine (``tasks``: the
    library's, each with its features and targets, dev features and gold scores, its
    generator and its record of rounds)."""
    return [_fit_loop(task, protocol) for task in tasks]


class _Adam:
    """Adam on one tensor, exactly as ``torch.optim.Adam``'s single-tensor update, but
    with the step count kept on the host, so a step never waits for the device."""

    def __init__(self, param: torch.Tensor, lr: float) -> None:
        self.param, self.lr, self.steps = param, lr, 0
        self.beta1, self.beta2, self.eps = 0.9, 0.999, 1e-8
        self.exp_avg = torch.zeros_like(param)
        self.exp_avg_sq = torch.zeros_like(param)

    def step(self, grad: torch.Tensor) -> None:
        self.steps += 1
        self.exp_avg.lerp_(grad, 1 - self.beta1)
        self.exp_avg_sq.mul_(self.beta2).addcmul_(grad, grad, value=1 - self.beta2)
        correction1 = 1 - self.beta1**self.steps
        correction2_sqrt = math.sqrt(1 - self.beta2**self.steps)
        denom = (self.exp_avg_sq.sqrt() / correction2_sqrt).add_(self.eps)
        self.param.addcdiv_(self.exp_avg, denom, value=-self.lr / correction1)


def _gradient(weights: torch.Tensor, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Gradient of ``sum((softmax(x W^T) - target)^2)`` w.r.t. W (SentEval's MSELoss with
    ``size_average=False``); x carries a ones column, so W's last column is the bias."""
    p = torch.softmax(x @ weights.T, dim=1)
    d_p = 2 * (p - target)
    d_logits = p * (d_p - (p * d_p).sum(dim=1, keepdim=True))  # through the softmax
    return d_logits.T @ x


def _train_round(
    adam: _Adam,
    x: torch.Tensor,
    target: torch.Tensor,
    epochs: int,
    batch_size: int,
    generator: torch.Generator,
) -> None:
    # Shuffles are drawn on the CPU (the same on every device) and sent once per round.
    orders = torch.stack([torch.randperm(len(x), generator=generator) for _ in range(epochs)])
    for order in orders.to(x.device):
        for start in range(0, len(x), batch_size):
            batch = order[start : start + batch_size]
            x_batch, target_batch = x.index_select(0, batch), target.index_select(0, batch)
            adam.step(_gradient(adam.param, x_batch, target_batch))


def _fit_loop(task: Any, protocol: RelatednessProtocol) -> torch.Tensor:
    """One task, one 64-row step per Python iteration."""
    x, target, generator = task.x, task.target, task.generator
    adam = _Adam(_initial_weights(x.shape[1], generator, x.device, x.dtype), protocol.lr)
    rounds = task.rounds
    while rounds.going(protocol):
        _train_round(adam, x, target, protocol.epochs_per_round, protocol.batch_size, generator)
        r = _device_pearson(_expected_score(adam.param, task.dev_x), task.dev_gold).item()
        rounds.judge(r, adam.param, protocol)
    return rounds.result()


def _expected_score(weights: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``softmax(x W^T) . [1..5]``: the prediction on the class scale. Each row's logits
    are computed alike (an element-wise product and a sum per class, in slices of rows),
    so that equal features give exactly equal predictions: a matrix product may round
    some rows differently from others, and constant predictions must stay constant (a
    NaN dev Pearson, a constant test prediction, as SentEval's rule expects)."""
    classes = torch.arange(1, N_CLASSES + 1, dtype=x.dtype, device=x.device)
    rows = max(1, (1 << 22) // max(1, x.shape[1]))  # ~16 MB of float32 products at a time
    parts = [torch.stack([(part * w).sum(dim=1) for w in weights], dim=1) for part in x.split(rows)]
    logits = torch.cat(parts) if parts else x.new_zeros(0, len(weights))
    return (torch.softmax(logits, dim=1) * classes).sum(dim=1)


def _device_pearson(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Pearson r on the device (NaN for a constant input), read once per round."""
    x, y = x.double() - x.double().mean(), y - y.mean()
    return (x * y).sum() / torch.sqrt((x * x).sum() * (y * y).sum())


def _initial_weights(
    dim: int, generator: torch.Generator, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """nn.Linear's default init, weight and bias (the last column): U(-1/sqrt(fan_in),
    1/sqrt(fan_in)), drawn in float64 on the CPU from the task's generator."""
    bound = 1 / math.sqrt(dim - 1)
    weights = (torch.rand(N_CLASSES, dim, generator=generator, dtype=torch.float64) * 2 - 1) * bound
    return weights.to(device, dtype)
