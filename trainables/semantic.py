"""Semantic evaluation of a sentence encoder (docs/protocols.md section 5), split by what it is for.

- ``DevSemanticEvaluator``, for **selection**: the unsupervised cosine Pearson and
  Spearman on STS-B dev and SICK-R trial, and ``semantic``, the mean of the two Pearsons
  (``trainables.names`` says how the dev and test scores are combined). It reads dev data
  only, and is cheap enough for every epoch.
- ``SemanticEvaluator``, for **reporting**: the battery on the test data. STS12-16 per
  subtask (cosine Pearson and Spearman), per year and over the years; STS-B and SICK-R by
  SentEval's supervised relatedness protocol on their test splits; the unsupervised
  cosine Pearson and Spearman on the same test splits (the protocol of SimCSE and MTEB);
  and ``semantic``, the paper's Fig. 4 combination ``(sts12_16_pearson + sickr_pearson)
  / 2``.

Both are called with an ``embed`` function (sentences -> one embedding per sentence),
embed every distinct sentence once and return ``dict[str, float]`` with the names of
``trainables.names`` (without a split prefix). ``make_semantic`` builds the pair the
``Trainer`` uses.

Correlations are plain numbers in [-1, 1], not x100. Pearson and Spearman are undefined
for a constant input (an untrained or collapsed encoder can embed every sentence alike):
such a correlation is reported as 0.0 and a warning is logged.

STS-B's gold scores lie in [0, 5] and SentEval's classes stand for 1..5. By default
(``stsb_encoding="senteval"``) they are encoded exactly as SentEval does, a score y < 1
putting mass y on the first class only, so that the same embeddings give SentEval's (and
the paper's Table 5) numbers; ``"rescaled"`` maps [0, 5] linearly onto [1, 5] first and the
predictions back, keeping every target a distribution (a named correction, never the
default).

Example (``encode`` stands for any sentence encoder that batches internally)::

    from storage.senteval import load_senteval

    benchmark = load_senteval("SentEval/data/downstream")
    DevSemanticEvaluator(benchmark)(encode)["semantic"]       # selection: dev data only
    battery = SemanticEvaluator(benchmark, device="cuda")(encode)  # reporting: test data
    battery["sts12_16_pearson"], battery["stsb_pearson"], battery["sickr_cosine_spearman"]
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import torch

from storage.senteval import OFFICIAL_SUPERVISED, SemanticBenchmark, SentencePairs, load_senteval
from trainables import names
from trainables.config import STSB_ENCODINGS, EvalConfig, RunConfig
from trainables.device import resolve_device
from trainables.metrics import correlations
from trainables.relatedness import SENTEVAL, RelatednessProtocol, supervised_relatedness_tasks

__all__ = [
    "DevSemanticEvaluator",
    "Embed",
    "EmbeddingTable",
    "SemanticEvaluation",
    "SemanticEvaluator",
    "cosine_correlations",
    "cosine_similarity",
    "dev_semantic_score",
    "make_semantic",
    "semantic_score",
    "sts_metrics",
]

_log = logging.getLogger(__name__)

Embed: TypeAlias = Callable[[Sequence[str]], np.ndarray | torch.Tensor]


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


def cosine_similarity(a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    """Row-wise cosine similarity in float64; a zero vector has similarity 0."""
    x = a.to(torch.float64).cpu().numpy()
    y = b.to(torch.float64).cpu().numpy()
    norms = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
    return np.einsum("ij,ij->i", x, y) / np.maximum(norms, 1e-300)


def cosine_correlations(embed: Embed, pairs: SentencePairs) -> tuple[float, float]:
    """(Pearson, Spearman) of the pairs' cosine similarities against their gold scores:
    the unsupervised STS protocol."""
    vectors = EmbeddingTable.build(embed, (*pairs.sentences1, *pairs.sentences2))
    sims = cosine_similarity(vectors(pairs.sentences1), vectors(pairs.sentences2))
    return correlations(sims, pairs.gold, pairs.name)


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
    table = EmbeddingTable.build(embed, _distinct_sentences(pair_sets))
    metrics: dict[str, float] = {}
    year_means: list[float] = []
    for year, subtasks in benchmark.sts.items():
        rs, counts = [], []
        for subtask, pairs in subtasks.items():
            r, rho = cosine_correlations(table, pairs)
            metrics[names.subtask_key(year, subtask, "pearson")] = r
            metrics[names.subtask_key(year, subtask, "spearman")] = rho
            rs.append(r)
            counts.append(len(pairs))
        metrics[_year_key(year, "pearson")] = float(np.average(rs, weights=counts))
        metrics[_year_key(year, "pearson_mean")] = float(np.mean(rs))
        year_means.append(metrics[_year_key(year, "pearson")])
    metrics["sts12_16_pearson"] = float(np.mean(year_means))
    return metrics


def dev_semantic_score(metrics: Mapping[str, float]) -> float:
    """``dev/semantic``: the mean of the cosine Pearsons on STS-B dev and SICK-R trial
    (``names.DEV_SEMANTIC_PARTS``) that are present; NaN with neither::

        >>> dev_semantic_score({"stsb_cosine_pearson": 0.5, "sickr_cosine_pearson": 0.7})
        0.6
    """
    parts = [metrics[k] for k in names.DEV_SEMANTIC_PARTS if k in metrics]
    return float(np.mean(parts)) if parts else math.nan


def semantic_score(metrics: Mapping[str, float]) -> float:
    """The battery's combined score, the paper's Fig. 4 combination:
    ``(sts12_16_pearson + sickr_pearson) / 2``; the one present if only one is; else
    ``stsb_pearson``; else NaN."""
    parts = [metrics[k] for k in ("sts12_16_pearson", "sickr_pearson") if k in metrics]
    if parts:
        return float(np.mean(parts))
    return float(metrics.get("stsb_pearson", math.nan))


def _distinct_sentences(pair_sets: Sequence[SentencePairs]) -> list[str]:
    return list(dict.fromkeys(s for p in pair_sets for s in (*p.sentences1, *p.sentences2)))


class DevSemanticEvaluator:
    """The selection score, on dev data only: the cosine Pearson and Spearman on STS-B dev
    and SICK-R trial (those the benchmark has) and ``semantic``, the mean of the two
    Pearsons. No classifier is trained, so it is cheap enough for every epoch."""

    def __init__(self, benchmark: SemanticBenchmark) -> None:
        self.sets = {
            names.task_prefix(name): task.dev for name, task in benchmark.supervised.items()
        }
        self.sentences = _distinct_sentences(list(self.sets.values()))

    def __bool__(self) -> bool:
        return bool(self.sets)

    def __call__(self, embed: Embed) -> dict[str, float]:
        table = EmbeddingTable.build(embed, self.sentences)
        metrics: dict[str, float] = {}
        for prefix, pairs in self.sets.items():
            r, rho = cosine_correlations(table, pairs)
            metrics[f"{prefix}_cosine_pearson"] = r
            metrics[f"{prefix}_cosine_spearman"] = rho
        if metrics:
            metrics["semantic"] = dev_semantic_score(metrics)
        return metrics


class SemanticEvaluator:
    """The reported battery on a fixed ``SemanticBenchmark``'s test data (see the module
    docstring for the metrics); ``supervised`` names the supervised tasks to run, those
    the benchmark lacks being skipped. Its ``semantic`` is the paper's Fig. 4 combination
    (``semantic_score``); it is for reporting, never for selection."""

    def __init__(
        self,
        benchmark: SemanticBenchmark,
        *,
        supervised: Sequence[str] = ("SICK-R", "STS-B"),
        device: str | torch.device = "cpu",
        seed: int = 0,
        protocol: RelatednessProtocol = SENTEVAL,
        stsb_encoding: str = "senteval",
    ) -> None:
        unknown = [name for name in supervised if name not in OFFICIAL_SUPERVISED]
        if unknown:
            raise ValueError(
                f"supervised: unknown task(s) {unknown}; valid: {list(OFFICIAL_SUPERVISED)}"
            )
        if stsb_encoding not in STSB_ENCODINGS:
            raise ValueError(
                f"stsb_encoding: got {stsb_encoding!r}, expected one of {', '.join(STSB_ENCODINGS)}"
            )
        missing = [name for name in supervised if name not in benchmark.supervised]
        if missing:
            _log.info("semantic suite %r has no %s; skipped", benchmark.suite.name, missing)
        self.benchmark = benchmark
        self.tasks = [benchmark.supervised[n] for n in supervised if n in benchmark.supervised]
        self.device, self.seed, self.protocol = device, seed, protocol
        self.stsb_encoding = stsb_encoding
        pair_sets = [p for year in benchmark.sts.values() for p in year.values()]
        pair_sets += [p for task in self.tasks for p in (task.train, task.dev, task.test)]
        self.sentences = _distinct_sentences(pair_sets)

    def __call__(self, embed: Embed) -> dict[str, float]:
        """Embed every distinct sentence once; return the STS, supervised, cosine and
        combined metrics (names without a split prefix)."""
        table = EmbeddingTable.build(embed, self.sentences)
        metrics = sts_metrics(table, self.benchmark)
        if self.tasks:  # trained together (the same numbers as each alone, to rounding)
            metrics.update(
                supervised_relatedness_tasks(
                    table,
                    self.tasks,
                    device=self.device,
                    seed=self.seed,
                    protocol=self.protocol,
                    encodings={"STS-B": self.stsb_encoding},
                )
            )
        for task in self.tasks:
            r, rho = cosine_correlations(table, task.test)
            prefix = names.task_prefix(task.name)
            metrics[f"{prefix}_cosine_pearson"] = r
            metrics[f"{prefix}_cosine_spearman"] = rho
        metrics["semantic"] = semantic_score(metrics)
        return metrics


@dataclass(frozen=True)
class SemanticEvaluation:
    """What the ``Trainer`` evaluates: ``dev`` after every epoch (selection), ``test``
    every ``semantic_every`` epochs and for the final ensemble (reporting). The Trainer
    computes the epochs' test battery in a background worker while training goes on, its
    metrics filed under their own epoch (``trainables._battery``)."""

    dev: DevSemanticEvaluator
    test: SemanticEvaluator


def make_semantic(
    senteval: str | os.PathLike[str] | SemanticBenchmark | None,
    evaluation: EvalConfig,
    run: RunConfig,
) -> SemanticEvaluation | None:
    """The semantic evaluation for ``senteval`` (a SentEval ``data/downstream`` directory,
    or the benchmark already loaded from one) as ``evaluation`` asks, on ``run``'s device
    with its seed; ``None`` when there is nothing to evaluate (no sets, or
    ``semantic_every == 0``)."""
    if senteval is None or evaluation.semantic_every == 0:
        return None
    benchmark = senteval if isinstance(senteval, SemanticBenchmark) else load_senteval(senteval)
    dev = DevSemanticEvaluator(benchmark)
    if not dev:
        _log.warning(
            "semantic suite %r has neither STS-B nor SICK-R: there is no dev semantic score "
            "(dev/semantic), so nothing can select on semantic performance",
            benchmark.suite.name,
        )
    device = resolve_device(run.device)
    test = SemanticEvaluator(
        benchmark, device=device, seed=run.seed, stsb_encoding=evaluation.stsb_encoding
    )
    return SemanticEvaluation(dev, test)
