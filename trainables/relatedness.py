"""SentEval's supervised relatedness protocol for STS-B and SICK-R (SPEC section 5).

Features ``[|u - v|, u * v]`` of the two sentences' embeddings; the gold score encoded as a
5-class target distribution; a linear layer + softmax trained with summed squared error
by Adam in rounds of 50 epochs, keeping the round with the best dev Pearson of the
expected score ``softmax . [1..5]``; reported on the test pairs. As in SentEval
(``senteval/tools/relatedness.py``): batches of 64 (the last, shorter one kept), at most 21
rounds (a round starts while at most 1,000 epochs are done), stop after the 4th round
that does not beat the best (misses are not reset), a NaN dev Pearson counts as 0.

``stsb_encoding`` says how STS-B's [0, 5] scores meet the classes 1..5:

- ``"senteval"`` (default): as SentEval, ``p[floor(y)] = y - floor(y)`` and
  ``p[floor(y) - 1] = floor(y) - y + 1`` (0-based classes for scores 1..5), so a score
  y < 1 puts mass y on the first class only and its target sums to y < 1; predictions
  are compared with the gold scores as they are. This gives SentEval's numbers.
- ``"rescaled"``: scores mapped linearly onto [1, 5] first (every target a distribution),
  predictions mapped back before the MSE. Correlations of a fixed prediction do not
  change under the linear map, but the trained classifier does.

SICK-R's scores lie in [1, 5], where both encodings are the same.

    >>> relatedness_targets(np.array([3.4, 0.4]), (0.0, 5.0)).round(2).tolist()
    [[0.0, 0.0, 0.6, 0.4, 0.0], [0.4, 0.0, 0.0, 0.0, 0.0]]
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from storage.senteval import SupervisedTask
from trainables import names
from trainables.metrics import correlations

__all__ = [
    "N_CLASSES",
    "SENTEVAL",
    "RelatednessProtocol",
    "cpu_threads",
    "from_class_scale",
    "predict_relatedness",
    "relatedness_targets",
    "supervised_relatedness",
    "to_class_scale",
]

_log = logging.getLogger(__name__)

N_CLASSES = 5  # SentEval's relatedness classes, for scores 1, 2, 3, 4, 5
# sentences -> their embeddings, as rows of a tensor (an EmbeddingTable, typically)
Lookup = Callable[[Sequence[str]], torch.Tensor]


@dataclass(frozen=True)
class RelatednessProtocol:
    """SentEval's supervised relatedness protocol (``senteval/tools/relatedness.py``)."""

    lr: float = 1e-3  # Adam's learning rate (PyTorch's default betas and eps, no decay)
    batch_size: int = 64  # the last, shorter batch of an epoch is kept, as in SentEval
    epochs_per_round: int = 50  # the dev Pearson is computed after every round
    patience: int = 4  # stop at the 4th round (in all, as SentEval) not beating the best
    max_epoch: int = 1000  # a round starts while at most this many epochs are done: 21


SENTEVAL = RelatednessProtocol()  # SentEval's own settings (frozen: safe as a default)


def to_class_scale(scores: np.ndarray, score_range: tuple[float, float]) -> np.ndarray:
    """Map gold scores linearly from ``score_range`` onto SentEval's class scale [1, 5]
    (the ``"rescaled"`` encoding; SICK-R's [1, 5] is left as it is)."""
    low, high = score_range
    y = _in_range(scores, score_range)
    return np.clip(1.0 + (N_CLASSES - 1) * (y - low) / (high - low), 1.0, N_CLASSES)


def from_class_scale(values: np.ndarray, score_range: tuple[float, float]) -> np.ndarray:
    """The inverse of ``to_class_scale``: predictions back on the gold scale."""
    low, high = score_range
    return low + (np.asarray(values, dtype=np.float64) - 1.0) * (high - low) / (N_CLASSES - 1)


def _in_range(scores: np.ndarray, score_range: tuple[float, float]) -> np.ndarray:
    y = np.asarray(scores, dtype=np.float64)
    low, high = score_range
    if y.size and (y.min() < low or y.max() > high):
        raise ValueError(f"scores must lie in {score_range}, got [{y.min()}, {y.max()}]")
    return y


def relatedness_targets(
    scores: np.ndarray, score_range: tuple[float, float], encoding: str = "senteval"
) -> np.ndarray:
    """Target distributions, shape (n, 5), of gold ``scores`` in ``score_range``: a
    score y puts ``floor(y) - y + 1`` on class ``floor(y) - 1`` and ``y - floor(y)`` on
    class ``floor(y)`` (0-based; classes stand for scores 1..5), the classes outside 0..4
    dropped. ``encoding="senteval"`` uses y as it is (y < 1: mass y on class 0 only);
    ``"rescaled"`` first maps ``score_range`` onto [1, 5] (see ``to_class_scale``)."""
    _check_encoding(encoding)
    if encoding == "rescaled":
        y = to_class_scale(scores, score_range)
    else:
        y = _in_range(scores, score_range)
    floor = np.floor(y).astype(np.int64)
    rows = np.arange(y.size)
    target = np.zeros((y.size, N_CLASSES + 2))  # a spare column at each end: class -1 and 5
    target[rows, floor + 1] = y - floor
    target[rows, floor] = floor - y + 1
    return target[:, 1 : N_CLASSES + 1]


def _check_encoding(encoding: str) -> None:
    if encoding not in ("senteval", "rescaled"):
        raise ValueError(f"stsb_encoding: got {encoding!r}, expected 'senteval' or 'rescaled'")


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


def _expected_score(weights: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``softmax(x W^T) . [1..5]``: the prediction on the class scale."""
    classes = torch.arange(1, N_CLASSES + 1, dtype=x.dtype, device=x.device)
    return torch.softmax(x @ weights.T, dim=1) @ classes


def _device_pearson(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Pearson r on the device (NaN for a constant input), read once per round."""
    x, y = x.double() - x.double().mean(), y - y.mean()
    return (x * y).sum() / torch.sqrt((x * x).sum() * (y * y).sum())


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


def _fit(
    train: tuple[torch.Tensor, torch.Tensor],
    dev: tuple[torch.Tensor, torch.Tensor],
    protocol: RelatednessProtocol,
    generator: torch.Generator,
    what: str,
) -> torch.Tensor:
    """Train in rounds; return the weights of the round with the best dev Pearson, a NaN
    Pearson counting as 0 as in SentEval (so when every round's is NaN, the first round's
    model is kept, with a warning)."""
    x, target = train
    bound = 1 / math.sqrt(x.shape[1] - 1)  # nn.Linear's default init, weight and bias
    weights = (
        torch.rand(N_CLASSES, x.shape[1], generator=generator, dtype=torch.float64) * 2 - 1
    ) * bound
    adam = _Adam(weights.to(x.device, x.dtype), protocol.lr)
    best, best_r, misses, epochs, rounds, nan_rounds = None, -1.0, 0, 0, 0, 0
    while misses < protocol.patience and epochs <= protocol.max_epoch:
        _train_round(adam, x, target, protocol.epochs_per_round, protocol.batch_size, generator)
        epochs, rounds = epochs + protocol.epochs_per_round, rounds + 1
        r = _device_pearson(_expected_score(adam.param, dev[0]), dev[1]).item()
        if math.isnan(r):
            r, nan_rounds = 0.0, nan_rounds + 1
        if r > best_r or best is None:
            best, best_r = adam.param.clone(), r
        else:
            misses += 1  # not reset by an improvement, as in SentEval
    if nan_rounds == rounds:
        _log.warning(
            "%s: the dev Pearson was NaN (constant predictions) after every one of %d "
            "rounds; kept the first round's model, as SentEval does",
            what,
            rounds,
        )
    _log.debug("%s: %d epochs, best dev Pearson %.4f", what, epochs, best_r)
    assert best is not None  # at least one round always runs
    return best


@contextmanager
def cpu_threads(threads: int | None, device: str | torch.device) -> Iterator[None]:
    """Set torch's intra-op thread count for the block (CPU only), then restore it."""
    if threads is None or torch.device(device).type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def predict_relatedness(
    embed: Lookup,
    task: SupervisedTask,
    *,
    device: str | torch.device = "cpu",
    seed: int = 0,
    protocol: RelatednessProtocol = SENTEVAL,
    encoding: str = "senteval",
    threads: int | None = 1,
) -> np.ndarray:
    """The protocol's predictions for ``task``'s test pairs, on the gold scale (float64):
    the classifier trained on the train pairs and chosen on the dev pairs (see the module
    docstring). ``embed`` returns the embeddings of given sentences (an ``EmbeddingTable``
    holding every sentence of the task, typically). Runs on ``device`` with all data
    there; deterministic for a given ``seed`` and device.

    On the CPU the training runs with ``threads`` torch threads (restored afterwards;
    ``None`` leaves torch's setting alone): its 64-row steps gain nothing from more
    threads, and a second thread waiting on a busy core made them 10-20x slower.
    """
    _check_encoding(encoding)

    def features(sentences1: Sequence[str], sentences2: Sequence[str]) -> torch.Tensor:
        u = embed(sentences1).to(device, torch.float32)
        v = embed(sentences2).to(device, torch.float32)
        return torch.cat([(u - v).abs(), u * v, torch.ones_like(u[:, :1])], dim=1)

    def on_device(array: np.ndarray) -> torch.Tensor:
        return torch.tensor(array, device=device)  # a copy: the gold arrays are read-only

    train_target = relatedness_targets(task.train.gold, task.score_range, encoding)
    with cpu_threads(threads, device):
        weights = _fit(
            (
                features(task.train.sentences1, task.train.sentences2),
                on_device(train_target.astype(np.float32)),
            ),
            (features(task.dev.sentences1, task.dev.sentences2), on_device(task.dev.gold)),
            protocol,
            torch.Generator().manual_seed(seed),
            task.name,
        )
        test_x = features(task.test.sentences1, task.test.sentences2)
        scores = _expected_score(weights, test_x).double().cpu().numpy()
    return from_class_scale(scores, task.score_range) if encoding == "rescaled" else scores


def supervised_relatedness(
    embed: Lookup,
    task: SupervisedTask,
    *,
    device: str | torch.device = "cpu",
    seed: int = 0,
    protocol: RelatednessProtocol = SENTEVAL,
    encoding: str = "senteval",
    threads: int | None = 1,
) -> dict[str, float]:
    """``<task>_pearson``, ``<task>_spearman`` and ``<task>_mse`` of the protocol's test
    predictions (``predict_relatedness``, same arguments) against the gold scores;
    ``<task>`` is ``names.task_prefix(task.name)`` ("stsb", "sickr")."""
    started = time.perf_counter()
    pred = predict_relatedness(
        embed, task, device=device, seed=seed, protocol=protocol, encoding=encoding, threads=threads
    )
    gold = task.test.gold
    prefix = names.task_prefix(task.name)
    r, rho = correlations(pred, gold, f"{task.name}/test")
    _log.debug("%s: %.2f s", task.name, time.perf_counter() - started)
    return {
        f"{prefix}_pearson": r,
        f"{prefix}_spearman": rho,
        f"{prefix}_mse": float(np.mean((pred - gold) ** 2)),
    }
