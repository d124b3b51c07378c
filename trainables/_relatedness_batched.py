"""The engine of SentEval's supervised relatedness protocol (``trainables.relatedness``,
whose docstring describes it): the tasks of a battery trained together, their weights
stacked, each round on the device (as CUDA graphs on CUDA); each task the same, up to
rounding, as trained alone by the reference engine (``bench/_relatedness_loop.py``, one
64-row step per Python iteration). Also the initial weights, the expected score, the dev
Pearson and SentEval's rule for keeping the best round and stopping (``_Rounds``)."""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

__all__ = ["N_CLASSES", "Settings", "Task", "expected_score", "fit_batched"]

_log = logging.getLogger("trainables.relatedness")  # the protocol's logger

N_CLASSES = 5  # SentEval's relatedness classes, for scores 1, 2, 3, 4, 5


class Settings(Protocol):
    """What the engine reads of a protocol's settings (``trainables.relatedness``'s
    ``RelatednessProtocol`` is one, and says what each means)."""

    @property
    def lr(self) -> float: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def epochs_per_round(self) -> int: ...
    @property
    def patience(self) -> int: ...
    @property
    def max_epoch(self) -> int: ...
    @property
    def cuda_graph(self) -> bool: ...


def expected_score(weights: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
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


class _Rounds:
    """Where one task's rounds stand (the host side of the protocol): SentEval's rule
    for keeping the best round and stopping."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.best: torch.Tensor | None = None
        self.best_r, self.misses, self.epochs, self.rounds, self.nan_rounds = -1.0, 0, 0, 0, 0

    def going(self, protocol: Settings) -> bool:
        return self.misses < protocol.patience and self.epochs <= protocol.max_epoch

    def judge(self, r: float, weights: torch.Tensor, protocol: Settings) -> None:
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


@dataclass(eq=False)
class Task:
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

    def __init__(self, tasks: list[Task], protocol: Settings) -> None:
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

    def _plan(self, task: Task) -> torch.Tensor:
        """The round's batches of ``task``: rows of the engine's data, ``(epochs *
        batches, batch_size)``, each epoch's last batch padded with the zero row. The
        shuffles are drawn as the loop engine draws them: one ``randperm`` per epoch."""
        epochs, size, n = self.protocol.epochs_per_round, self.protocol.batch_size, len(task.x)
        orders = torch.stack([torch.randperm(n, generator=task.generator) for _ in range(epochs)])
        padded = torch.full((epochs, task.batches * size), self.padding, dtype=torch.long)
        padded[:, :n] = orders + task.offset
        return padded.view(epochs * task.batches, size)

    def _adam_scalars(self, task: Task) -> tuple[torch.Tensor, torch.Tensor]:
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
            _device_pearson(expected_score(self.weights[i], task.dev_x), task.dev_gold)
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


def fit_batched(tasks: list[Task], protocol: Settings) -> list[torch.Tensor]:
    """The best round's weights of every task, trained together (see the module
    docstring); each the same, up to rounding, as training it alone."""
    dims = {task.x.shape[1] for task in tasks}
    if len(dims) > 1:  # tasks of different embeddings cannot share a stack
        return [w for task in tasks for w in fit_batched([task], protocol)]
    return _Batched(tasks, protocol).fit()
