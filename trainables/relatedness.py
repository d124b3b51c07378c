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

How it runs (``RelatednessProtocol.engine``; the arithmetic is the same either way, up to
floating-point rounding, and so are the shuffles and the initial weights, drawn on the
CPU from one ``torch.Generator`` per task seeded with ``seed``):

- ``"batched"`` (default): the tasks of a battery (SICK-R and STS-B) train together. Their
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
  another gives the same weights up to rounding (tests/trainables/test_relatedness.py).
- ``"loop"``: the original implementation, one task at a time and one 64-row step per
  Python iteration; kept as the reference and the benchmarks' baseline
  (``bench/bench_eval.py``).

    >>> relatedness_targets(np.array([3.4, 0.4]), (0.0, 5.0)).round(2).tolist()
    [[0.0, 0.0, 0.6, 0.4, 0.0], [0.4, 0.0, 0.0, 0.0, 0.0]]
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from storage.senteval import SupervisedTask
from trainables import names
from trainables.metrics import correlations

__all__ = [
    "ENGINES",
    "N_CLASSES",
    "SENTEVAL",
    "RelatednessProtocol",
    "cpu_threads",
    "from_class_scale",
    "predict_relatedness",
    "predict_relatedness_tasks",
    "relatedness_targets",
    "supervised_relatedness",
    "supervised_relatedness_tasks",
    "to_class_scale",
]

_log = logging.getLogger(__name__)

N_CLASSES = 5  # SentEval's relatedness classes, for scores 1, 2, 3, 4, 5
ENGINES = ("batched", "loop")
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
    # how it runs, not what it computes (see the module docstring): "batched" (the tasks
    # of a battery together, on the device) or "loop" (the reference: a task at a time)
    engine: str = "batched"
    cuda_graph: bool = True  # "batched" on CUDA: run the rounds as CUDA graphs

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine: got {self.engine!r}, expected one of {', '.join(ENGINES)}")


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


def _initial_weights(
    dim: int, generator: torch.Generator, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """nn.Linear's default init, weight and bias (the last column): U(-1/sqrt(fan_in),
    1/sqrt(fan_in)), drawn in float64 on the CPU from the task's generator."""
    bound = 1 / math.sqrt(dim - 1)
    weights = (torch.rand(N_CLASSES, dim, generator=generator, dtype=torch.float64) * 2 - 1) * bound
    return weights.to(device, dtype)


def _fit(
    train: tuple[torch.Tensor, torch.Tensor],
    dev: tuple[torch.Tensor, torch.Tensor],
    protocol: RelatednessProtocol,
    generator: torch.Generator,
    what: str,
) -> torch.Tensor:
    """Train in rounds; return the weights of the round with the best dev Pearson, a NaN
    Pearson counting as 0 as in SentEval (so when every round's is NaN, the first round's
    model is kept, with a warning). One task, by ``protocol.engine``."""
    if protocol.engine == "loop":
        return _fit_loop(train, dev, protocol, generator, what)
    return _fit_batched([_Task(what, *train, *dev, generator)], protocol)[0]


def _fit_loop(
    train: tuple[torch.Tensor, torch.Tensor],
    dev: tuple[torch.Tensor, torch.Tensor],
    protocol: RelatednessProtocol,
    generator: torch.Generator,
    what: str,
) -> torch.Tensor:
    """The reference engine: one task, one 64-row step per Python iteration."""
    x, target = train
    adam = _Adam(_initial_weights(x.shape[1], generator, x.device, x.dtype), protocol.lr)
    state = _Rounds(what)
    while state.going(protocol):
        _train_round(adam, x, target, protocol.epochs_per_round, protocol.batch_size, generator)
        r = _device_pearson(_expected_score(adam.param, dev[0]), dev[1]).item()
        state.judge(r, adam.param, protocol)
    return state.result()


class _Rounds:
    """Where one task's rounds stand (the host side of the protocol): SentEval's rule
    for keeping the best round and stopping."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.best: torch.Tensor | None = None
        self.best_r, self.misses, self.epochs, self.rounds, self.nan_rounds = -1.0, 0, 0, 0, 0

    def going(self, protocol: RelatednessProtocol) -> bool:
        return self.misses < protocol.patience and self.epochs <= protocol.max_epoch

    def judge(self, r: float, weights: torch.Tensor, protocol: RelatednessProtocol) -> None:
        """After a round: its dev Pearson ``r`` and the weights it ended with."""
        self.epochs, self.rounds = self.epochs + protocol.epochs_per_round, self.rounds + 1
        if math.isnan(r):
            r, self.nan_rounds = 0.0, self.nan_rounds + 1
        if r > self.best_r or self.best is None:
            self.best, self.best_r = weights.clone(), r  # a copy on the device: no sync
        else:
            self.misses += 1  # not reset by an improvement, as in SentEval

    def result(self) -> torch.Tensor:
        if self.nan_rounds == self.rounds:
            _log.warning(
                "%s: the dev Pearson was NaN (constant predictions) after every one of %d "
                "rounds; kept the first round's model, as SentEval does",
                self.what,
                self.rounds,
            )
        _log.debug("%s: %d epochs, best dev Pearson %.4f", self.what, self.epochs, self.best_r)
        assert self.best is not None  # at least one round always runs
        return self.best


# -- the batched engine --------------------------------------------------------------


@dataclass(eq=False)
class _Task:
    """One task's fit for the batched engine: its data on the device, its generator, and
    where its rounds and its Adam steps stand."""

    what: str
    x: torch.Tensor  # (n, d) features, the last column ones
    target: torch.Tensor  # (n, 5)
    dev_x: torch.Tensor
    dev_gold: torch.Tensor
    generator: torch.Generator

    def __post_init__(self) -> None:
        self.rounds = _Rounds(self.what)
        self.adam_steps = 0  # steps taken so far (Adam's bias corrections)
        self.offset = 0  # its first row in the engine's data
        self.batches = 0  # per epoch


_CAPTURE = threading.Lock()  # one CUDA graph capture at a time in a process


class _Batched:
    """The weights and Adam moments of the tasks still training, stacked ``(tasks, 5,
    d)`` in order of batches per epoch, most first: the tasks still inside a round's
    tail are always a leading slice. The moments are kept for half the gradient (the
    summed squared error's gradient is exactly twice what ``_half_step`` computes), with
    Adam's update written for them, so no step spends an operation on the factor 2."""

    def __init__(self, tasks: list[_Task], protocol: RelatednessProtocol) -> None:
        self.protocol = protocol
        first = tasks[0].x
        self.device, self.dtype, self.dim = first.device, first.dtype, first.shape[1]
        self.all_tasks = tasks
        rows: list[torch.Tensor] = []
        for task in tasks:
            task.offset = sum(r.shape[0] for r in rows)
            task.batches = -(-len(task.x) // protocol.batch_size)
            rows.append(torch.cat([task.x, task.target.to(self.dtype)], dim=1))
        # every task's rows, features then targets, and an all-zero row: the padding of
        # a short batch (its features are zero, so its gradient is exactly zero)
        rows.append(torch.zeros(1, self.dim + N_CLASSES, device=self.device, dtype=self.dtype))
        self.data = torch.cat(rows)
        self.padding = len(self.data) - 1
        self.tasks = sorted(tasks, key=lambda t: -t.batches)  # stable: ties keep their order
        weights = [_initial_weights(self.dim, t.generator, self.device, self.dtype) for t in tasks]
        order = [tasks.index(t) for t in self.tasks]
        self.weights = torch.stack([weights[i] for i in order])
        self.exp_avg = torch.zeros_like(self.weights)
        self.exp_avg_sq = torch.zeros_like(self.weights)
        self.use_graphs = protocol.cuda_graph and self.device.type == "cuda"
        self.graphs: dict[tuple[int, int], _Graph] = {}

    def fit(self) -> list[torch.Tensor]:
        while self.tasks:
            self._round()
            self._judge()
        return [task.rounds.result() for task in self.all_tasks]

    # -- a round ---------------------------------------------------------------------

    def _round(self) -> None:
        """``epochs_per_round`` epochs of every task still training. Step k of the round
        takes step k of every task that has one; the tasks with fewer batches per epoch
        finish their round first. Phase by phase (a leading slice of tasks that still
        have steps), each phase one run per epoch of the same number of steps."""
        epochs = self.protocol.epochs_per_round
        plans = [self._plan(task) for task in self.tasks]  # (epochs * batches, 64) each
        scalars = [self._adam_scalars(task) for task in self.tasks]
        batches = [task.batches for task in self.tasks] + [0]
        for live in range(len(self.tasks), 0, -1):  # tasks[:live] still have steps
            steps = batches[live - 1] - batches[live]  # per epoch of this phase
            if steps == 0:
                continue
            span = slice(epochs * batches[live], epochs * batches[live - 1])
            rows = torch.stack([plan[span] for plan in plans[:live]], dim=1)
            a = torch.stack([s[0][span] for s in scalars[:live]], dim=1)
            b = torch.stack([s[1][span] for s in scalars[:live]], dim=1)
            rows, a, b = (self._upload(t) for t in (rows, a, b))
            self._run_phase(live, steps, rows, a.view(*a.shape, 1, 1), b.view(*b.shape, 1, 1))
        for task in self.tasks:
            task.adam_steps += epochs * task.batches

    def _plan(self, task: _Task) -> torch.Tensor:
        """The round's batches of ``task``: rows of the engine's data, ``(epochs *
        batches, batch_size)``, each epoch's last batch padded with the zero row. The
        shuffles are drawn as the loop engine draws them: one ``randperm`` per epoch."""
        epochs, size, n = self.protocol.epochs_per_round, self.protocol.batch_size, len(task.x)
        orders = torch.stack([torch.randperm(n, generator=task.generator) for _ in range(epochs)])
        padded = torch.full((epochs, task.batches * size), self.padding, dtype=torch.long)
        padded[:, :n] = orders + task.offset
        return padded.view(epochs * task.batches, size)

    def _adam_scalars(self, task: _Task) -> tuple[torch.Tensor, torch.Tensor]:
        """Per step of the round, the ``a`` and ``b`` of the update ``w -= m / (sqrt(v) *
        a + b)`` with the moments of half the gradient: Adam's ``lr / (1 - beta1^t)`` and
        ``sqrt(1 - beta2^t)`` folded in (in float64 on the host, once per round)."""
        p = self.protocol
        t = np.arange(1, p.epochs_per_round * task.batches + 1, dtype=np.float64)
        t += task.adam_steps
        step = p.lr / (1 - _BETA1**t)
        a = 1 / (np.sqrt(1 - _BETA2**t) * step)
        b = (_EPS / 2) / step  # Adam's eps, for the moments of half the gradient
        return torch.from_numpy(a), torch.from_numpy(b)

    def _upload(self, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.is_floating_point():
            tensor = tensor.to(self.dtype)
        if self.device.type == "cuda":
            return tensor.pin_memory().to(self.device, non_blocking=True)
        return tensor.to(self.device)

    def _run_phase(
        self, live: int, steps: int, rows: torch.Tensor, a: torch.Tensor, b: torch.Tensor
    ) -> None:
        state = (self.weights[:live], self.exp_avg[:live], self.exp_avg_sq[:live])
        if self.use_graphs:
            try:
                graph = self.graphs.get((live, steps))
                if graph is None:
                    graph = self.graphs[(live, steps)] = _Graph(self, state, rows, a, b, steps)
                for start in range(0, len(rows), steps):
                    graph.replay(rows[start : start + steps], a[start : start + steps],
                                 b[start : start + steps])  # fmt: skip
                return
            except RuntimeError as err:  # a capture this process cannot make: eager instead
                if self.graphs.get((live, steps)) is not None:
                    raise  # a graph that replayed once does not fail later
                _log.warning("CUDA graph capture failed (%s); the regressions run eagerly", err)
                self.use_graphs = False
        self._steps(state, rows, a, b)

    def _steps(
        self,
        state: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        rows: torch.Tensor,
        a: torch.Tensor,
        b: torch.Tensor,
    ) -> None:
        for step_rows, step_a, step_b in zip(rows.unbind(0), a.unbind(0), b.unbind(0), strict=True):
            _half_step(*state, self.data, self.dim, step_rows, step_a, step_b)

    # -- after a round ---------------------------------------------------------------

    def _judge(self) -> None:
        """Every task's dev Pearson, read in one transfer (the round's one sync), then
        SentEval's rule per task; the tasks that stop leave the stack."""
        pearsons = [
            _device_pearson(_expected_score(self.weights[i], task.dev_x), task.dev_gold)
            for i, task in enumerate(self.tasks)
        ]
        values = torch.stack(pearsons).tolist()
        for i, (task, r) in enumerate(zip(self.tasks, values, strict=True)):
            task.rounds.judge(r, self.weights[i], self.protocol)
        keep = [i for i, task in enumerate(self.tasks) if task.rounds.going(self.protocol)]
        if len(keep) < len(self.tasks):
            self.tasks = [self.tasks[i] for i in keep]
            index = torch.tensor(keep, dtype=torch.long, device=self.device)
            self.weights, self.exp_avg, self.exp_avg_sq = (
                t.index_select(0, index) for t in (self.weights, self.exp_avg, self.exp_avg_sq)
            )
            self.graphs.clear()  # captured on the old stack


_BETA1, _BETA2, _EPS = 0.9, 0.999, 1e-8  # torch.optim.Adam's defaults, as SentEval's


def _half_step(
    weights: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    data: torch.Tensor,
    dim: int,
    rows: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
) -> None:
    """One Adam step of every task in the stack on its batch ``rows`` (tasks, 64): the
    gradient of ``sum((softmax(x W^T) - target)^2)`` w.r.t. W, halved, through Adam with
    the moments of half the gradient (``_Batched``); ``a`` and ``b`` ``(tasks, 1, 1)``
    carry the step's bias corrections (``_Batched._adam_scalars``)."""
    batch = data.index_select(0, rows.reshape(-1)).view(rows.shape[0], rows.shape[1], -1)
    x, target = batch[..., :dim], batch[..., dim:]
    p = torch.softmax(torch.bmm(x, weights.transpose(1, 2)), dim=2)
    pg = p * (p - target)
    half = torch.addcmul(pg, p, pg.sum(dim=2, keepdim=True), value=-1)  # d loss / d logits / 2
    grad = torch.bmm(half.transpose(1, 2), x)
    exp_avg.lerp_(grad, 1 - _BETA1)
    exp_avg_sq.mul_(_BETA2).addcmul_(grad, grad, value=1 - _BETA2)
    weights.addcdiv_(exp_avg, torch.addcmul(b, exp_avg_sq.sqrt(), a), value=-1)


class _Graph:
    """A phase's steps for one epoch (``steps`` steps of a ``live``-task slice) captured
    as a CUDA graph on a side stream, with its inputs in static buffers; replayed once
    per epoch of the phase on the caller's stream."""

    def __init__(
        self,
        engine: _Batched,
        state: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        rows: torch.Tensor,
        a: torch.Tensor,
        b: torch.Tensor,
        steps: int,
    ) -> None:
        self.rows, self.a, self.b = rows[:steps].clone(), a[:steps].clone(), b[:steps].clone()
        self.graph = torch.cuda.CUDAGraph()
        caller = torch.cuda.current_stream(engine.device)
        side = torch.cuda.Stream(engine.device)
        side.wait_stream(caller)
        with _CAPTURE, torch.cuda.stream(side):
            # a warm-up on copies of the state (cuBLAS' workspace for this stream, lazy
            # kernel loading) outside the capture; the real state is not touched
            copies = (state[0].clone(), state[1].clone(), state[2].clone())
            engine._steps(copies, self.rows, self.a, self.b)
            self.graph.capture_begin(capture_error_mode="thread_local")
            try:
                engine._steps(state, self.rows, self.a, self.b)
            finally:
                self.graph.capture_end()
        caller.wait_stream(side)

    def replay(self, rows: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
        self.rows.copy_(rows)
        self.a.copy_(a)
        self.b.copy_(b)
        self.graph.replay()


def _fit_batched(tasks: list[_Task], protocol: RelatednessProtocol) -> list[torch.Tensor]:
    """The best round's weights of every task, trained together (see the module
    docstring); each the same, up to rounding, as training it alone."""
    dims = {task.x.shape[1] for task in tasks}
    if len(dims) > 1:  # tasks of different embeddings cannot share a stack
        return [w for task in tasks for w in _fit_batched([task], protocol)]
    return _Batched(tasks, protocol).fit()


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
    its STS-B encoding (default "senteval"). With the batched engine the tasks train
    together; each task's predictions are those it gets alone (each task's generator is
    seeded with ``seed``), up to rounding."""
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
        if protocol.engine == "loop":
            best = [_fit_loop(t, d, protocol, g, task.name) for task, t, d, g in fits]
        else:
            best = _fit_batched([_Task(task.name, *t, *d, g) for task, t, d, g in fits], protocol)
        for (task, _, _, _), weights in zip(fits, best, strict=True):
            test_x = features(task.test.sentences1, task.test.sentences2)
            scores = _expected_score(weights, test_x).double().cpu().numpy()
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
    _check_encoding(encoding)
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
    """``supervised_relatedness`` of several tasks at once (``predict_relatedness_tasks``,
    same arguments): every task's three metrics in one dict."""
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
    _check_encoding(encoding)
    return supervised_relatedness_tasks(
        embed,
        [task],
        device=device,
        seed=seed,
        protocol=protocol,
        encodings={task.name: encoding},
        threads=threads,
    )
