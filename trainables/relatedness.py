"""SentEval's supervised relatedness protocol for STS-B and SICK-R (docs/protocols.md section 5).

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

How it runs: the tasks of a battery (SICK-R and STS-B) train together. Their
  weights are stacked, ``(tasks, 5, d)``, and every step is a pair of batched matmuls over
  one 64-row batch per task, a last, shorter batch padded with an all-zero feature row
  (whose gradient is exactly zero). Each task keeps its own Adam step count, shuffles and
  rounds, and stops on its own; a task whose epochs have fewer batches sits out the tail
  of the round. Features, targets, a round's batch plan and Adam's bias corrections live
  on the device; the host reads the dev Pearsons once per round (one transfer for all the
  tasks), never inside one. On CUDA a round runs as CUDA graphs (one per batch pattern,
  captured once per fit on a side stream, replayed once per epoch of a round: ~17 small
  kernels a step, with no Python between them), with the eager steps as the fallback
  (``cuda_graph=False``, or a capture that fails). Training a task alone or beside
  another gives the same weights up to rounding, and the same as SentEval's loop, one
  task at a time and one 64-row step per Python iteration, whose reference
  (``bench/_relatedness_loop.py``, the tests' check and the benchmarks' baseline) a
  protocol may be given as its ``fit``. The shuffles and the initial weights are drawn on
  the CPU from one ``torch.Generator`` per task seeded with ``seed``.

The engine lives in ``trainables._relatedness_batched`` (with the initial weights, the
expected score and SentEval's rule for the rounds); this module is the protocol: its
settings, the targets, the features and the predictions and metrics of a battery's tasks.

    >>> relatedness_targets(np.array([3.4, 0.4]), (0.0, 5.0)).round(2).tolist()
    [[0.0, 0.0, 0.6, 0.4, 0.0], [0.4, 0.0, 0.0, 0.0, 0.0]]
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from storage.senteval import SupervisedTask
from trainables import names
from trainables._relatedness_batched import N_CLASSES, Task, expected_score, fit_batched
from trainables.metrics import correlations

__all__ = [
    "N_CLASSES",
    "SENTEVAL",
    "RelatednessProtocol",
    "cpu_threads",
    "from_class_scale",
    "predict_relatedness",
    "predict_relatedness_tasks",
    "relatedness_targets",
    "supervised_relatedness_tasks",
    "to_class_scale",
]

_log = logging.getLogger(__name__)

# a battery's tasks -> each one's best weights (the batched engine; a reference in bench/)
Fit = Callable[[Sequence[Task], "RelatednessProtocol"], list[torch.Tensor]]
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
    cuda_graph: bool = True  # on CUDA: run the rounds as CUDA graphs
    # how the tasks are fitted, not what is computed: None, the batched engine; the tests
    # and benchmarks give SentEval's loop (bench/_relatedness_loop.py) to check and time it
    fit: Fit | None = None

    def fitted(self, tasks: Sequence[Task]) -> list[torch.Tensor]:
        """Each of ``tasks``' best weights, fitted as this protocol says."""
        return (self.fit or fit_batched)(list(tasks), self)


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


def predict_relatedness_tasks(
    embed: Lookup,
    tasks: Sequence[SupervisedTask],
    *,
    device: str | torch.device = "cpu",
    seed: int = 0,
    protocol: RelatednessProtocol = SENTEVAL,
    encodings: Mapping[str, str] | None = None,
    threads: int | None = 1,
) -> dict[str, np.ndarray]:
    """``predict_relatedness`` for several tasks at once (a battery's SICK-R and STS-B):
    per task name, its test predictions on the gold scale. ``encodings``: per task name,
    its STS-B encoding (default "senteval"). The tasks train together; each task's
    predictions are those it gets alone (each task's generator is seeded with ``seed``),
    up to rounding."""
    encodings = dict(encodings or {})
    for encoding in encodings.values():
        _check_encoding(encoding)

    def features(sentences1: Sequence[str], sentences2: Sequence[str]) -> torch.Tensor:
        u = embed(sentences1).to(device, torch.float32)
        v = embed(sentences2).to(device, torch.float32)
        return torch.cat([(u - v).abs(), u * v, torch.ones_like(u[:, :1])], dim=1)

    def on_device(array: np.ndarray) -> torch.Tensor:
        return torch.tensor(array, device=device)  # a copy: the gold arrays are read-only

    predictions: dict[str, np.ndarray] = {}
    with cpu_threads(threads, device):
        fits = []
        for task in tasks:
            encoding = encodings.get(task.name, "senteval")
            target = relatedness_targets(task.train.gold, task.score_range, encoding)
            train = (
                features(task.train.sentences1, task.train.sentences2),
                on_device(target.astype(np.float32)),
            )
            dev = (features(task.dev.sentences1, task.dev.sentences2), on_device(task.dev.gold))
            fits.append((task, train, dev, torch.Generator().manual_seed(seed)))
        best = protocol.fitted([Task(task.name, *t, *d, g) for task, t, d, g in fits])
        for (task, _, _, _), weights in zip(fits, best, strict=True):
            test_x = features(task.test.sentences1, task.test.sentences2)
            scores = expected_score(weights, test_x).double().cpu().numpy()
            rescaled = encodings.get(task.name, "senteval") == "rescaled"
            predictions[task.name] = (
                from_class_scale(scores, task.score_range) if rescaled else scores
            )
    return predictions


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
    return predict_relatedness_tasks(
        embed,
        [task],
        device=device,
        seed=seed,
        protocol=protocol,
        encodings={task.name: encoding},
        threads=threads,
    )[task.name]


def _metrics(task: SupervisedTask, pred: np.ndarray) -> dict[str, float]:
    gold = task.test.gold
    prefix = names.task_prefix(task.name)
    r, rho = correlations(pred, gold, f"{task.name}/test")
    return {
        f"{prefix}_pearson": r,
        f"{prefix}_spearman": rho,
        f"{prefix}_mse": float(np.mean((pred - gold) ** 2)),
    }


def supervised_relatedness_tasks(
    embed: Lookup,
    tasks: Sequence[SupervisedTask],
    *,
    device: str | torch.device = "cpu",
    seed: int = 0,
    protocol: RelatednessProtocol = SENTEVAL,
    encodings: Mapping[str, str] | None = None,
    threads: int | None = 1,
) -> dict[str, float]:
    """Every task's ``<task>_pearson``, ``<task>_spearman`` and ``<task>_mse`` of the
    protocol's test predictions (``predict_relatedness_tasks``, same arguments) against
    the gold scores, in one dict; ``<task>`` is ``names.task_prefix(task.name)`` ("stsb",
    "sickr")."""
    started = time.perf_counter()
    predictions = predict_relatedness_tasks(
        embed,
        tasks,
        device=device,
        seed=seed,
        protocol=protocol,
        encodings=encodings,
        threads=threads,
    )
    metrics: dict[str, float] = {}
    for task in tasks:
        metrics.update(_metrics(task, predictions[task.name]))
    _log.debug("%s: %.2f s", ", ".join(t.name for t in tasks), time.perf_counter() - started)
    return metrics
