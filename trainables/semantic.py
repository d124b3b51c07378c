"""Semantic evaluation of a sentence encoder: STS12-16, and STS-B and SICK-R by SentEval's
supervised relatedness protocol (SPEC section 5).

``SemanticEvaluator`` holds a loaded ``SemanticBenchmark``; called with an ``embed``
function (sentences -> one embedding per sentence) it embeds every distinct sentence once
and returns ``dict[str, float]`` with the names of ``trainables.names``:

- per STS subtask ``names.subtask_key(year, subtask, "pearson" | "spearman")``; per year
  ``sts12_pearson`` (mean over subtasks weighted by their pair counts) and
  ``sts12_pearson_mean`` (plain mean); ``sts12_16_pearson``, the plain mean over the
  years present of the weighted means;
- ``stsb_*`` and ``sickr_*``: test Pearson, Spearman and MSE of SentEval's classifier;
- ``semantic``, the one number the trade-off curves use (the paper's Fig. 4 combines
  SICK-R and STS12-16): ``(sts12_16_pearson + sickr_pearson) / 2``; with only one of the
  two present, that one; with neither, ``stsb_pearson`` (see ``semantic_score``).

Correlations are plain numbers in [-1, 1], not x100. Pearson and Spearman are undefined
for a constant input (an untrained or collapsed encoder can embed every sentence alike):
such a correlation is reported as 0.0 and a warning is logged.

Example (``encode`` stands for any sentence encoder that batches internally)::

    from storage.senteval import load_senteval

    evaluator = SemanticEvaluator(load_senteval("SentEval/data/downstream"), device="cuda")
    metrics = evaluator(lambda sentences: encode(sentences))  # (n, dim) array or tensor
    metrics["semantic"], metrics["sts12_16_pearson"], metrics["sickr_pearson"]
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import torch

from storage.senteval import OFFICIAL_SUPERVISED, SemanticBenchmark, SupervisedTask
from trainables import names
from trainables.metrics import pearson, spearman

_log = logging.getLogger(__name__)

Embed: TypeAlias = Callable[[Sequence[str]], np.ndarray | torch.Tensor]
N_CLASSES = 5  # SentEval's relatedness classes, for scores 1, 2, 3, 4, 5


class EmbeddingTable:
    """The embeddings of fixed sentences, each computed once; callable like an ``Embed``
    (returning a tensor on the device the embeddings came on)."""

    def __init__(self, sentences: Sequence[str], vectors: torch.Tensor) -> None:
        self.index = {sentence: row for row, sentence in enumerate(sentences)}
        self.vectors = vectors  # (len(sentences), dim), detached

    @classmethod
    def build(cls, embed: Embed, sentences: Iterable[str]) -> EmbeddingTable:
        """Call ``embed`` once with the distinct ``sentences`` (first-seen order);
        ``embed`` must batch internally if it needs to."""
        distinct = list(dict.fromkeys(sentences))
        if isinstance(embed, EmbeddingTable) and all(s in embed.index for s in distinct):
            return embed
        vectors = embed(distinct)
        if isinstance(vectors, np.ndarray):
            vectors = torch.from_numpy(vectors)
        if not isinstance(vectors, torch.Tensor):
            raise TypeError(
                f"embed must return a numpy.ndarray or torch.Tensor, got {type(vectors).__name__}"
            )
        if vectors.ndim != 2 or vectors.shape[0] != len(distinct):
            raise ValueError(
                f"embed must return one row per sentence, shape ({len(distinct)}, dim), "
                f"got shape {tuple(vectors.shape)}"
            )
        return cls(distinct, vectors.detach())

    def __call__(self, sentences: Sequence[str]) -> torch.Tensor:
        try:
            rows = [self.index[sentence] for sentence in sentences]
        except KeyError as err:
            raise KeyError(f"sentence {err.args[0]!r} is not in the embedding table") from None
        return self.vectors[torch.tensor(rows, dtype=torch.long, device=self.vectors.device)]


def _correlations(pred: np.ndarray, gold: np.ndarray, what: str) -> tuple[float, float]:
    """(Pearson, Spearman); (0.0, 0.0) with a warning when either side is constant."""
    if pred.size < 2 or np.ptp(pred) == 0 or np.ptp(gold) == 0:
        _log.warning("%s: constant predictions or gold scores; correlations set to 0.0", what)
        return 0.0, 0.0
    return pearson(pred, gold), spearman(pred, gold)


def _cosine(a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    """Row-wise cosine similarity in float64; a zero vector has similarity 0."""
    x = a.to(torch.float64).cpu().numpy()
    y = b.to(torch.float64).cpu().numpy()
    norms = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
    return np.einsum("ij,ij->i", x, y) / np.maximum(norms, 1e-300)


def _year_key(year: str, suffix: str) -> str:
    return f"{year.lower()}_{suffix}"  # "STS12" -> "sts12_pearson"


def sts_metrics(embed: Embed, benchmark: SemanticBenchmark) -> dict[str, float]:
    """STS12-16: per subtask the Pearson r and Spearman rho of the cosine similarity of
    the two sentences' embeddings against the gold scores; per year their pair-weighted
    (``stsYY_pearson``) and plain (``stsYY_pearson_mean``) means over subtasks; and
    ``sts12_16_pearson``, the mean over the years present of the weighted means.

    ``embed`` is called once, with every distinct STS sentence. A subtask whose
    similarities are constant gets correlations 0.0 and a logged warning.
    """
    if not benchmark.sts:
        return {}
    pair_sets = [pairs for year in benchmark.sts.values() for pairs in year.values()]
    table = EmbeddingTable.build(
        embed, (s for p in pair_sets for s in (*p.sentences1, *p.sentences2))
    )
    metrics: dict[str, float] = {}
    year_means: list[float] = []
    for year, subtasks in benchmark.sts.items():
        rs, counts = [], []
        for subtask, pairs in subtasks.items():
            sims = _cosine(table(pairs.sentences1), table(pairs.sentences2))
            r, rho = _correlations(sims, pairs.gold, pairs.name)
            metrics[names.subtask_key(year, subtask, "pearson")] = r
            metrics[names.subtask_key(year, subtask, "spearman")] = rho
            rs.append(r)
            counts.append(len(pairs))
        metrics[_year_key(year, "pearson")] = float(np.average(rs, weights=counts))
        metrics[_year_key(year, "pearson_mean")] = float(np.mean(rs))
        year_means.append(metrics[_year_key(year, "pearson")])
    metrics["sts12_16_pearson"] = float(np.mean(year_means))
    return metrics


@dataclass(frozen=True)
class RelatednessProtocol:
    """SentEval's supervised relatedness protocol (``senteval/tools/relatedness.py``)."""

    lr: float = 1e-3  # Adam's learning rate (PyTorch's default betas and eps, no decay)
    batch_size: int = 64  # the last, shorter batch of an epoch is kept, as in SentEval
    epochs_per_round: int = 50  # the dev Pearson is computed after every round
    patience: int = 4  # stop at the 4th round (in all, as SentEval) not beating the best
    max_epochs: int = 1000  # hard cap, so at most 20 rounds


def to_class_scale(scores: np.ndarray, score_range: tuple[float, float]) -> np.ndarray:
    """Map gold scores linearly from ``score_range`` onto SentEval's class scale [1, 5].

    SentEval encodes STS-B's 0-5 scores as they are, which loses probability mass for
    scores below 1 (the target sums to y < 1); mapping [0, 5] onto [1, 5] instead keeps
    every target a distribution and changes no correlation (the map is linear). SICK-R's
    range is already [1, 5], so it is left as it is.
    """
    low, high = score_range
    y = np.asarray(scores, dtype=np.float64)
    if y.size and (y.min() < low or y.max() > high):
        raise ValueError(f"scores must lie in {score_range}, got [{y.min()}, {y.max()}]")
    return np.clip(1.0 + (N_CLASSES - 1) * (y - low) / (high - low), 1.0, N_CLASSES)


def from_class_scale(values: np.ndarray, score_range: tuple[float, float]) -> np.ndarray:
    """The inverse of ``to_class_scale``: predictions back on the gold scale."""
    low, high = score_range
    return low + (np.asarray(values, dtype=np.float64) - 1.0) * (high - low) / (N_CLASSES - 1)


def relatedness_targets(scores: np.ndarray, score_range: tuple[float, float]) -> np.ndarray:
    """SentEval's target distributions, shape (n, 5): a score y on the class scale [1, 5]
    puts ``floor(y) - y + 1`` on class ``floor(y) - 1`` and ``y - floor(y)`` on class
    ``floor(y)`` (0-based; classes stand for scores 1..5), so ``p . [1..5] == y``::

        >>> relatedness_targets(np.array([3.4, 5.0]), (1.0, 5.0)).round(2).tolist()
        [[0.0, 0.0, 0.6, 0.4, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0]]
    """
    y = to_class_scale(scores, score_range)
    floor = np.floor(y).astype(np.int64)
    rows = np.arange(y.size)
    target = np.zeros((y.size, N_CLASSES + 1))  # a spare column for y == 5
    target[rows, floor] = y - floor
    target[rows, floor - 1] = floor - y + 1
    return target[:, :N_CLASSES]


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
    """Train in rounds; return the weights of the round with the best dev Pearson."""
    x, target = train
    bound = 1 / math.sqrt(x.shape[1] - 1)  # nn.Linear's default init, weight and bias
    weights = (
        torch.rand(N_CLASSES, x.shape[1], generator=generator, dtype=torch.float64) * 2 - 1
    ) * bound
    adam = _Adam(weights.to(x.device, x.dtype), protocol.lr)
    best, best_r, misses, epochs = adam.param.clone(), -math.inf, 0, 0
    while epochs < protocol.max_epochs and misses < protocol.patience:
        round_epochs = min(protocol.epochs_per_round, protocol.max_epochs - epochs)
        _train_round(adam, x, target, round_epochs, protocol.batch_size, generator)
        epochs += round_epochs
        r = _device_pearson(_expected_score(adam.param, dev[0]), dev[1]).item()
        if r > best_r:  # NaN (constant predictions) never improves
            best, best_r = adam.param.clone(), r
        else:
            misses += 1  # not reset by an improvement, as in SentEval
    _log.debug("%s: %d epochs, best dev Pearson %.4f", what, epochs, best_r)
    return best


@contextmanager
def _cpu_threads(threads: int | None, device: str | torch.device) -> Iterator[None]:
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


def supervised_relatedness(
    embed: Embed,
    task: SupervisedTask,
    *,
    device: str | torch.device = "cpu",
    seed: int = 0,
    protocol: RelatednessProtocol = RelatednessProtocol(),  # frozen, so safe as a default
    cpu_threads: int | None = 1,
) -> dict[str, float]:
    """SentEval's supervised relatedness protocol on ``task`` (STS-B or SICK-R).

    Features ``[|u - v|, u * v]`` of the two sentences' embeddings; gold scores encoded by
    ``relatedness_targets`` (STS-B's [0, 5] mapped linearly onto [1, 5] first, see
    ``to_class_scale``; predictions are mapped back before the MSE); a linear layer +
    softmax trained with summed squared error by Adam in rounds (see
    ``RelatednessProtocol``), keeping the round with the best dev Pearson of
    ``softmax . [1..5]``. Returns ``<task>_pearson``, ``<task>_spearman`` and
    ``<task>_mse`` on the test pairs (``<task>`` = "stsb" or "sickr"). Runs on ``device``
    with all data there; deterministic for a given ``seed`` and device.

    On the CPU the training runs with ``cpu_threads`` torch threads (restored afterwards;
    ``None`` leaves torch's setting alone): its 64-row steps gain nothing from more
    threads, and a second thread waiting on a busy core made them 10-20x slower.
    """
    started = time.perf_counter()
    table = EmbeddingTable.build(
        embed,
        (s for p in (task.train, task.dev, task.test) for s in (*p.sentences1, *p.sentences2)),
    )

    def features(sentences1: Sequence[str], sentences2: Sequence[str]) -> torch.Tensor:
        u = table(sentences1).to(device, torch.float32)
        v = table(sentences2).to(device, torch.float32)
        return torch.cat([(u - v).abs(), u * v, torch.ones_like(u[:, :1])], dim=1)

    def on_device(array: np.ndarray) -> torch.Tensor:
        return torch.tensor(array, device=device)  # a copy: the gold arrays are read-only

    train_target = relatedness_targets(task.train.gold, task.score_range).astype(np.float32)
    with _cpu_threads(cpu_threads, device):
        weights = _fit(
            (features(task.train.sentences1, task.train.sentences2), on_device(train_target)),
            (features(task.dev.sentences1, task.dev.sentences2), on_device(task.dev.gold)),
            protocol,
            torch.Generator().manual_seed(seed),
            task.name,
        )
        test_x = features(task.test.sentences1, task.test.sentences2)
        scores = _expected_score(weights, test_x).double().cpu().numpy()
    pred = from_class_scale(scores, task.score_range)
    r, rho = _correlations(pred, task.test.gold, f"{task.name}/test")
    prefix = re.sub(r"[^a-z0-9]", "", task.name.lower())  # "STS-B" -> "stsb"
    _log.debug("%s: %.2f s", task.name, time.perf_counter() - started)
    return {
        f"{prefix}_pearson": r,
        f"{prefix}_spearman": rho,
        f"{prefix}_mse": float(np.mean((pred - task.test.gold) ** 2)),
    }


def semantic_score(metrics: dict[str, float]) -> float:
    """The combined semantic score: ``(sts12_16_pearson + sickr_pearson) / 2``; the one
    present if only one is; else ``stsb_pearson``; else NaN."""
    parts = [metrics[k] for k in ("sts12_16_pearson", "sickr_pearson") if k in metrics]
    if parts:
        return float(np.mean(parts))
    return float(metrics.get("stsb_pearson", math.nan))


class SemanticEvaluator:
    """Evaluates an ``embed`` function on a fixed ``SemanticBenchmark`` (see the module
    docstring for the metrics); ``supervised`` names the supervised tasks to run, those
    the benchmark lacks being skipped. The primary metric ``semantic`` is
    ``(sts12_16_pearson + sickr_pearson) / 2`` (see ``semantic_score`` for fallbacks)."""

    primary_metric = "semantic"
    greater_is_better = True

    def __init__(
        self,
        benchmark: SemanticBenchmark,
        *,
        supervised: Sequence[str] = ("SICK-R", "STS-B"),
        device: str | torch.device = "cpu",
        seed: int = 0,
        protocol: RelatednessProtocol = RelatednessProtocol(),  # frozen, so safe as a default
        cpu_threads: int | None = 1,
    ) -> None:
        unknown = [name for name in supervised if name not in OFFICIAL_SUPERVISED]
        if unknown:
            raise ValueError(
                f"supervised: unknown task(s) {unknown}; valid: {list(OFFICIAL_SUPERVISED)}"
            )
        missing = [name for name in supervised if name not in benchmark.supervised]
        if missing:
            _log.info("semantic suite %r has no %s; skipped", benchmark.suite.name, missing)
        self.benchmark = benchmark
        self.tasks = [benchmark.supervised[n] for n in supervised if n in benchmark.supervised]
        self.device, self.seed, self.protocol = device, seed, protocol
        self.cpu_threads = cpu_threads  # see supervised_relatedness
        pair_sets = [p for year in benchmark.sts.values() for p in year.values()]
        pair_sets += [p for task in self.tasks for p in (task.train, task.dev, task.test)]
        self.sentences = list(
            dict.fromkeys(s for p in pair_sets for s in (*p.sentences1, *p.sentences2))
        )

    def __call__(self, embed: Embed) -> dict[str, float]:
        """Embed every distinct sentence once; return the STS, supervised and combined
        metrics (names without a split prefix)."""
        table = EmbeddingTable.build(embed, self.sentences)
        metrics = sts_metrics(table, self.benchmark)
        for task in self.tasks:
            metrics.update(
                supervised_relatedness(
                    table,
                    task,
                    device=self.device,
                    seed=self.seed,
                    protocol=self.protocol,
                    cpu_threads=self.cpu_threads,
                )
            )
        metrics["semantic"] = semantic_score(metrics)
        return metrics
