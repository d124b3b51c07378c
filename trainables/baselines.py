"""Simple baselines on a feature store: how learnable a data set is, before training.

    python -m trainables.baselines --data stores/world [--senteval DIR]

- chance: random rankings (R@K = K / N images, the analytic expectation);
- char n-grams: cosine of hashed character 1-4-gram count vectors (semantic sets only);
- n-gram ridge: a linear map (ridge regression, fitted on the train split) from those
  n-gram vectors to the L2-normalised image features; captions are embedded by the
  map, images by their own normalised features. Retrieval on the test split.

On the embedded world these land well above chance and well below the trained model
(README, "The embedded world").
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib
from collections.abc import Sequence

import numpy as np
import torch

from storage import StoreError
from storage.senteval import load_senteval
from trainables import names
from trainables.data import EncodedSplit, TrainingData, default_senteval
from trainables.metrics import retrieval_metrics
from trainables.semantic import SemanticEvaluator

__all__ = [
    "NGRAM_DIM",
    "NgramRidge",
    "baselines",
    "char_ngram_features",
    "main",
]


NGRAM_DIM = 4096


def char_ngram_features(texts: Sequence[str], dim: int = NGRAM_DIM) -> np.ndarray:
    """L2-normalised log counts of character 1-4-grams hashed into ``dim`` buckets."""
    counts = np.zeros((len(texts), dim))
    for row, text in enumerate(texts):
        grams = [text[i : i + n] for n in range(1, 5) for i in range(len(text) - n + 1)]
        np.add.at(counts[row], [zlib.crc32(g.encode()) % dim for g in grams], 1.0)
    counts = np.log1p(counts)
    return counts / np.maximum(np.linalg.norm(counts, axis=1, keepdims=True), 1e-12)


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


class NgramRidge:
    """Ridge regression from caption n-grams to normalised image features."""

    def __init__(self, train: EncodedSplit, ridge: float = 1.0) -> None:
        x = char_ngram_features(list(train.captions))
        y = np.repeat(_normalise(train.features.astype(np.float64)), 5, axis=0)
        self.mean = y.mean(axis=0)
        self.weights = np.linalg.solve(x.T @ x + ridge * np.eye(x.shape[1]), x.T @ (y - self.mean))

    def embed(self, sentences: Sequence[str]) -> torch.Tensor:
        mapped = char_ngram_features(sentences) @ self.weights + self.mean
        return torch.from_numpy(_normalise(mapped)).float()


def baselines(data: TrainingData, senteval: str | None) -> dict[str, dict[str, float]]:
    """Metrics (names as in :mod:`trainables.names`, test split) of each baseline."""
    test = data.test
    n = test.num_images
    chance = {f"{side}_r{k}": 100.0 * min(k, n) / n for side in ("c2i", "i2c") for k in (1, 5, 10)}
    chance["r10_mean"] = chance["c2i_r10"]
    ridge = NgramRidge(data.train)
    images = torch.from_numpy(_normalise(test.features.astype(np.float64))).float()
    results = {
        "chance": chance,
        "ngram_ridge": retrieval_metrics(images, ridge.embed(list(test.captions))),
    }
    if senteval is not None:
        evaluator = SemanticEvaluator(load_senteval(senteval))
        results["char_ngrams"] = evaluator(
            lambda s: torch.from_numpy(char_ngram_features(s)).float()
        )
        results["ngram_ridge"].update(evaluator(ridge.embed))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainables.baselines", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--data", required=True, help="feature store (path or URI)")
    parser.add_argument("--senteval", default=None, help="SentEval data/downstream directory")
    parser.add_argument("--json", action="store_true", help="print the metrics as JSON")
    args = parser.parse_args(argv)
    try:
        data = TrainingData.from_store(args.data)
        results = baselines(data, args.senteval or default_senteval(args.data))
    except StoreError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    columns = (
        "c2i_r1",
        "c2i_r10",
        "i2c_r1",
        "i2c_r10",
        "r10_mean",
        "sts12_16_pearson",
        "sickr_pearson",
        "semantic",
    )
    print(f"{'baseline':<12}" + "".join(f"{c:>17}" for c in columns))
    for name, metrics in results.items():
        cells = [f"{metrics[c]:17.3f}" if c in metrics else f"{'-':>17}" for c in columns]
        print(f"{name:<12}" + "".join(cells))
    print(
        f"(test split, {data.test.num_images} images; R@K in %, correlations in [-1, 1]; "
        f"names as in trainables.names, e.g. {names.key(names.TEST, 'r10_mean')})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
