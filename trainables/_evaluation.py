"""Scoring models on fixed data, the same for an epoch's model, a snapshot and the
ensemble: retrieval on a split, the dev semantic score, and the test battery (each
sentence embedded once for whatever asks for it). ``Evaluation`` holds the data it
scores on and keeps nothing of a run; the ``Trainer`` (``trainables.loop``) says when,
the battery's worker (``trainables._battery``) runs the battery in the background, and
the snapshot ensemble (``trainables._snapshots``) sums its members' embeddings.

    evaluation = Evaluation(config, semantic, tokenizer, device, (val_split, test_split))
    metrics, embeddings = evaluation.retrieval(evaluation.test_split, [model], "test")
    metrics = evaluation.semantic([model], dev=True, battery=None)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from trainables import names
from trainables.config import TrainConfig
from trainables.data import DeviceSplit
from trainables.embedding import embed_captions, embed_images, embed_sentences
from trainables.metrics import retrieval_metrics
from trainables.model import GroundedEncoder
from trainables.semantic import (
    DevSemanticEvaluator,
    EmbeddingTable,
    SemanticEvaluation,
    SemanticEvaluator,
)
from trainables.vocabulary import Tokenizer

__all__ = [
    "EmbedFn",
    "Embeddings",
    "Evaluation",
    "as_encoded",
    "best_so_far",
    "keyed",
    "summed",
]

EmbedFn = Callable[[Sequence[str]], torch.Tensor]
Embeddings = tuple[torch.Tensor, torch.Tensor]  # a split's (image, caption) embeddings


def as_encoded(summed: torch.Tensor, models: int) -> torch.Tensor:
    """The sum of ``models`` models' sentence embeddings as ``SentenceEncoder.encode``
    gives it by default, L2-normalised, so that the semantic scores a run reports (its
    ensemble's above all) are the ones its saved model reproduces: the supervised
    relatedness protocol is not scale-free. One model's is normalised already (by the
    model), and is left as it is."""
    return summed if models <= 1 else torch.nn.functional.normalize(summed, dim=1)


def summed(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Their sum from zeros, in order: what ``trainables.embedding`` computes for an
    ensemble from its models' embeddings (the same additions, so the same values)."""
    total = torch.zeros_like(tensors[0])
    for tensor in tensors:
        total += tensor
    return total


def keyed(prefix: str, values: Mapping[str, float | torch.Tensor]) -> dict[str, float]:
    """``values`` under ``prefix`` (``names.key``), as floats."""
    return {names.key(prefix, k): float(v) for k, v in values.items()}


def best_so_far(
    history: Sequence[Mapping[str, float]], metrics: Mapping[str, float]
) -> dict[str, float]:
    """The best dev objectives up to the epoch of ``metrics`` (``history``: the epochs
    before it), where one was computed."""
    best = {}
    for name in (names.PRIMARY_RETRIEVAL, names.PRIMARY_SEMANTIC):
        seen = [h[name] for h in history if name in h] + [metrics.get(name, math.nan)]
        if not all(math.isnan(v) for v in seen):
            best[names.best(name)] = float(np.nanmax(seen))
    return best


class Evaluation:
    """Scores models (one, or an ensemble whose embeddings are summed) on the dev and
    test splits (on ``device``) and the semantic sets; ``tokenizer`` encodes the
    semantic sentences."""

    def __init__(
        self,
        config: TrainConfig,
        semantic: SemanticEvaluation | None,
        tokenizer: Tokenizer,
        device: torch.device,
        splits: tuple[DeviceSplit, DeviceSplit],
    ) -> None:
        self.config = config
        self.semantic = semantic
        self.tokenizer = tokenizer
        self.device = device
        self.val_split, self.test_split = splits

    def retrieval(
        self, split: DeviceSplit, models: Sequence[GroundedEncoder], prefix: str
    ) -> tuple[dict[str, float], Embeddings]:
        """Retrieval metrics of ``models`` on ``split`` under ``prefix``, and the
        embeddings they come from."""
        with torch.inference_mode():
            images, captions = self.embed_split(split, models)
            values = retrieval_metrics(images, captions)
        return keyed(prefix, values), (images, captions)

    def semantic_scores(
        self,
        models: Sequence[GroundedEncoder],
        *,
        dev: bool,
        battery: str | None,
        on_table: Callable[[EmbeddingTable], None] | None = None,
    ) -> dict[str, float]:
        """The dev semantic score (``dev``) and the test battery under the name prefix
        ``battery`` (when given), every sentence embedded once for both; ``on_table``
        (the battery alone) gets the table of the battery's sentences before they are
        scored."""
        if self.semantic is None:
            return {}
        evaluators: list[tuple[str, DevSemanticEvaluator | SemanticEvaluator]] = []
        if dev and self.semantic.dev:
            evaluators.append((names.DEV, self.semantic.dev))
        if battery is not None:
            evaluators.append((battery, self.semantic.test))
        sentences = [s for _, evaluator in evaluators for s in evaluator.sentences]
        if not sentences:
            return {}
        table = EmbeddingTable.build(self.embed_fn(models), sentences)
        if on_table is not None and not dev:
            on_table(table)
        metrics: dict[str, float] = {}
        for prefix, evaluator in evaluators:
            metrics.update(keyed(prefix, evaluator(table)))
        return metrics

    def battery_of_sum(self, vectors: Sequence[torch.Tensor], prefix: str) -> dict[str, float]:
        """The test battery, under ``prefix``, of the sum of several models' embeddings
        of its sentences (``vectors``: each model's, in the order of its sentences),
        L2-normalised as the saved ensemble encodes by default (``as_encoded``)."""
        assert self.semantic is not None
        sentences = self.semantic.test.sentences
        with torch.inference_mode():
            total = as_encoded(summed(vectors), len(vectors))
        table = EmbeddingTable(sentences, total.to(self.device))
        return keyed(prefix, self.semantic.test(table))

    def embed_split(self, split: DeviceSplit, models: Sequence[GroundedEncoder]) -> Embeddings:
        """Image and caption embeddings of ``split``, summed over ``models``."""
        images = embed_images(models, split.features)
        captions = embed_captions(
            models,
            split.tokens,
            split.lengths,
            batch_size=self.config.eval_batch_size,
            precision=self.config.precision,
        )
        return images, captions

    def embed_fn(self, models: Sequence[GroundedEncoder]) -> EmbedFn:
        """Sentences -> caption embeddings summed over ``models``, as a saved ensemble
        encodes them by default (``as_encoded``), for the semantic sets."""

        def embed(sentences: Sequence[str]) -> torch.Tensor:
            total = embed_sentences(
                models,
                sentences,
                batch_size=self.config.eval_batch_size,
                precision=self.config.precision,
                encoding=self.tokenizer,
            )
            return as_encoded(total, len(models))

        return embed
