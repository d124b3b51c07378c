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

import hashlib
import json
import logging
import math
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from storage import CAPTIONS_PER_IMAGE, FeatureStore, StoreError
from storage.cli import OneLineParser
from storage.senteval import load_senteval
from trainables import names
from trainables.data import EncodedSplit, TrainingData, default_senteval
from trainables.metrics import retrieval_metrics
from trainables.semantic import DevSemanticEvaluator, EmbeddingTable, SemanticEvaluator

logger = logging.getLogger(__name__)

__all__ = [
    "BASELINES_FILE",
    "NGRAM_DIM",
    "NgramRidge",
    "baselines",
    "cached_baselines",
    "char_ngram_features",
    "from_json",
    "json_text",
    "main",
    "store_baselines",
]


NGRAM_DIM = 4096
RIDGE_MAX_CAPTIONS = 40_000  # the ridge is fitted on at most this many training captions


def char_ngram_features(texts: Sequence[str], dim: int = NGRAM_DIM) -> np.ndarray:
    """L2-normalised log counts of character 1-4-grams hashed into ``dim`` buckets (the
    CRC-32 of a gram's UTF-8 bytes, modulo ``dim``)."""
    counts = np.empty((len(texts), dim))
    bucket_of: dict[str, int] = {}  # captions share most of their grams: hash each once
    for start in range(0, len(texts), _COUNT_BLOCK):
        block = texts[start : start + _COUNT_BLOCK]
        cells: list[int] = []  # row * dim + bucket, one per gram occurrence
        for row, text in enumerate(block):
            offset = row * dim
            for n in range(1, 5):
                for i in range(len(text) - n + 1):
                    gram = text[i : i + n]
                    bucket = bucket_of.get(gram)
                    if bucket is None:
                        bucket = bucket_of[gram] = zlib.crc32(gram.encode()) % dim
                    cells.append(offset + bucket)
        cell_counts = np.bincount(np.asarray(cells, dtype=np.int64), minlength=len(block) * dim)
        counts[start : start + len(block)] = cell_counts.reshape(len(block), dim)
    return _normalise(np.log1p(counts))


_COUNT_BLOCK = 2048  # rows counted at a time (bounds the list of gram cells)


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


class NgramRidge:
    """Ridge regression from caption n-grams to normalised image features."""

    def __init__(self, train: EncodedSplit, ridge: float = 1.0) -> None:
        # at most RIDGE_MAX_CAPTIONS (the first images'): COCO's 566k captions would make
        # an 18 GB feature matrix, and the fit is stable long before that
        images = min(train.num_images, RIDGE_MAX_CAPTIONS // CAPTIONS_PER_IMAGE)
        x = char_ngram_features(list(train.captions[: images * CAPTIONS_PER_IMAGE]))
        y = np.repeat(_normalise(train.features[:images].astype(np.float64)), 5, axis=0)
        self.mean = y.mean(axis=0)
        self.weights = np.linalg.solve(x.T @ x + ridge * np.eye(x.shape[1]), x.T @ (y - self.mean))

    def embed(self, sentences: Sequence[str]) -> torch.Tensor:
        return self.map(char_ngram_features(sentences))

    def map(self, features: np.ndarray) -> torch.Tensor:
        """Sentences' embeddings from their ``char_ngram_features``."""
        return torch.from_numpy(_normalise(features @ self.weights + self.mean)).float()


def baselines(data: TrainingData, senteval: str | None) -> dict[str, dict[str, float]]:
    """Each baseline's metrics under the trials' names: ``dev/...`` on the val split and
    the dev semantic sets (what the trade-off curves are compared with) and ``test/...``
    on the test split and the semantic battery (what the tables are compared with)."""
    ridge = NgramRidge(data.train)
    results: dict[str, dict[str, float]] = {"chance": {}, "ngram_ridge": {}, "char_ngrams": {}}
    for split, items in ((names.DEV, data.val), (names.TEST, data.test)):
        n = items.num_images
        chance = {f"{d}_r{k}": 100.0 * min(k, n) / n for d in ("c2i", "i2c") for k in (1, 5, 10)}
        chance["r10_mean"] = chance["c2i_r10"]
        images = torch.from_numpy(_normalise(items.features.astype(np.float64))).float()
        ridge_metrics = retrieval_metrics(images, ridge.embed(list(items.captions)))
        results["chance"].update(_under(split, chance))
        results["ngram_ridge"].update(_under(split, ridge_metrics))
    if senteval is not None:
        bench = load_senteval(senteval)
        for split, evaluator in (
            (names.DEV, DevSemanticEvaluator(bench)),
            (names.TEST, SemanticEvaluator(bench)),
        ):
            # both baselines embed the same sentences from the same n-gram counts
            sentences = evaluator.sentences
            features = char_ngram_features(sentences)
            ngrams = EmbeddingTable(sentences, torch.from_numpy(features).float())
            results["char_ngrams"].update(_under(split, evaluator(ngrams)))
            mapped = EmbeddingTable(sentences, ridge.map(features))
            results["ngram_ridge"].update(_under(split, evaluator(mapped)))
    return {name: metrics for name, metrics in results.items() if metrics}


def _under(split: str, metrics: dict[str, float]) -> dict[str, float]:
    return {names.key(split, k): float(v) for k, v in metrics.items()}


# -- computed once per store, cached beside it ------------------------------------------

BASELINES_FILE = names.BASELINES_FILE  # in the store's folder (any filesystem it is on)
BASELINES_VERSION = 1  # raise when baselines() changes what it computes


def store_baselines(
    store: str,
    senteval: str | None,
    data: TrainingData | None = None,
) -> tuple[dict[str, dict[str, float]], str]:
    """The store's baselines and what became of its cache (``"read"``, ``"written"``, or
    ``"not written: REASON"``): ``baselines.json`` beside the store's manifest
    (``cached_baselines``) where it is valid, else computed (about a minute of CPU for the
    2,000-image embedded world, most of it on one core: SentEval's classifiers on 4,096-d
    n-gram features and the pure-Python n-gram counts) and written there; a store that
    cannot be written to is left alone (the baselines are computed again next time)."""
    opened = FeatureStore.open(store)
    key = _cache_key(opened, senteval)
    cached = _read_cache(opened, key)
    if cached is not None:
        return cached, "read"
    results = baselines(data or TrainingData.from_store(store), senteval)
    record = {"key": key, "baselines": results}
    try:
        opened.location.write_bytes(BASELINES_FILE, json_text(record).encode("utf-8"))
    except StoreError as err:
        return results, f"not written: {err}"
    return results, "written"


def cached_baselines(store: str, senteval: str | None) -> dict[str, dict[str, float]] | None:
    """The store's baselines as its ``baselines.json`` holds them, while that is valid:
    while the manifest (every shard's sha256), the semantic sets' contents and this code's
    version are what they were when it was written; None otherwise."""
    opened = FeatureStore.open(store)
    return _read_cache(opened, _cache_key(opened, senteval))


def _read_cache(opened: FeatureStore, key: dict[str, object]) -> dict[str, dict[str, float]] | None:
    try:
        cached = json.loads(opened.location.read_bytes(BASELINES_FILE))
        if isinstance(cached, dict) and cached.get("key") == key:
            return from_json(cached["baselines"])
    except (StoreError, ValueError, KeyError, TypeError) as err:  # absent, or not ours
        logger.debug("no usable %s in %s (%s)", BASELINES_FILE, opened.location, err)
    return None


def _cache_key(opened: FeatureStore, senteval: str | None) -> dict[str, object]:
    manifest = opened.location.read_bytes("manifest.json")
    return {
        "version": BASELINES_VERSION,
        "manifest_sha256": hashlib.sha256(manifest).hexdigest(),
        "senteval_sha256": _senteval_digest(senteval),
    }


def _senteval_digest(senteval: str | None) -> str | None:
    """sha256 over the STS and SICK files' relative paths and contents (what
    load_senteval reads), so an edited or replaced set invalidates the cache."""
    if senteval is None:
        return None
    digest = hashlib.sha256()
    root = Path(senteval)
    for path in sorted(p for part in ("STS", "SICK") for p in (root / part).rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def json_text(record: object) -> str:
    """Strict JSON (NaN, an undefined correlation, written as null)."""
    return json.dumps(_nulls(record), indent=1, allow_nan=False) + "\n"


def _nulls(value: object) -> object:
    if isinstance(value, dict):
        return {k: _nulls(v) for k, v in value.items()}
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def from_json(table: dict[str, dict[str, float | None]]) -> dict[str, dict[str, float]]:
    """A table as ``json_text`` wrote it, its nulls NaN again."""
    return {
        name: {k: math.nan if v is None else float(v) for k, v in metrics.items()}
        for name, metrics in table.items()
    }


_COLUMNS = (
    names.key(names.DEV, "r10_mean"),
    names.key(names.DEV, "semantic"),
    *(names.key(names.TEST, c) for c in ("c2i_r1", "c2i_r10", "i2c_r1", "i2c_r10", "r10_mean")),
    *(names.key(names.TEST, c) for c in ("sts12_16_pearson", "sickr_pearson", "semantic")),
)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="python -m trainables.baselines",
        description=__doc__.split("\n")[0],
        epilog=f"Computed once per store and cached beside it ({BASELINES_FILE}).",
    )
    parser.add_argument("--data", required=True, help="feature store (path or URI)")
    parser.add_argument(
        "--senteval", default=None, help="SentEval data/downstream directory (default: the store's)"
    )
    parser.add_argument("--json", action="store_true", help="print the metrics as JSON")
    args = parser.parse_args(argv)
    try:
        senteval = args.senteval or default_senteval(args.data)
        results, cache = store_baselines(args.data, senteval)
    except (StoreError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json_text(results), end="")
        return 0
    print(f"{'baseline':<12}" + "".join(f"{c:>22}" for c in _COLUMNS))
    for name, metrics in results.items():
        cells = [f"{metrics[c]:22.3f}" if c in metrics else f"{'-':>22}" for c in _COLUMNS]
        print(f"{name:<12}" + "".join(cells))
    print(
        "(dev = the val split and STS-B dev / SICK-R trial by cosine; test = the test split "
        "and the battery; R@K in %, correlations in [-1, 1]; "
        + ("read from the store's cache" if cache == "read" else f"computed; cache {cache}")
        + ")"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
