"""Evaluation metrics as pure functions: arrays in, numbers out.

Retrieval (docs/protocols.md section 5): ``N`` images and ``captions_per_image * N``
captions, caption ``j`` belonging to image ``j // captions_per_image``; the similarity is
the dot product of the embeddings as given (normalised embeddings, or the snapshot
ensemble's summed, un-renormalised ones: nothing is renormalised here).

- caption->image (``c2i``): the rank of the caption's image among the ``N`` images;
- image->caption (``i2c``): the best (lowest) rank of the image's captions among all
  captions.

Ranks are 1-based and **ties count against the query**: a query's rank is 1 + the number
of wrong candidates scoring *greater than or equal to* its correct match (for c2i: every
candidate scoring at least the correct image's score, the correct one included; for i2c
the correct match is the image's best caption, and its own other captions are not wrong
candidates). So a model whose embeddings are all equal (collapsed, or all zero) ranks
every correct item last among its ties: R@K is 0 for K < N, below chance (K/N), never the
100% that counting only strictly higher scores would give it. For any real-valued model
exact ties are rare and both rules agree.

R@K is ``hits * 100 / queries`` in percent (so 357 hits of 1,000 read 35.7, not
35.699999999999996). The median rank is an integer, as the paper's code and VSE++ report
it: the lower of the two middle ranks for an even number of queries, never x.5. The mean
rank is the plain mean.

Example::

    >>> import torch
    >>> images = torch.eye(3)
    >>> captions = images.repeat_interleave(5, dim=0)  # five exact captions per image
    >>> retrieval_metrics(images, captions)["c2i_r1"]
    100.0
    >>> lo, hi = pearson_ci(0.722, 1379)  # STS-B in the paper's Table 5: +2.4 / -2.6
    >>> round(100 * (hi - 0.722), 1), round(100 * (0.722 - lo), 1)
    (2.4, 2.6)
"""

from __future__ import annotations

import logging
from typing import TypeAlias

import numpy as np
import torch

from trainables import names
from trainables.stats import (
    RECALL_KS,
    Z95,
    correlations,
    median_rank,
    pearson,
    pearson_ci,
    recall_at,
    recall_ci,
    spearman,
)

__all__ = [
    "RECALL_KS",
    "RECALL_NAMES",
    "RETRIEVAL_CI",
    "Z95",
    "ci_key",
    "coco_1k",
    "coco_5k",
    "correlations",
    "median_rank",
    "pearson",
    "pearson_ci",
    "recall_at",
    "recall_ci",
    "retrieval_metrics",
    "retrieval_metrics_with_ci",
    "retrieval_ranks",
    "spearman",
    "summarise_ranks",
]

_log = logging.getLogger(__name__)

Embeddings: TypeAlias = torch.Tensor | np.ndarray
# Up to this size the whole N x kN score matrix is computed once and both directions
# read it (one matrix product instead of two: MSCOCO-5k's 25,000 x 5,000 float32 scores
# are 477 MiB); larger problems score chunk_size queries at a time for each direction.
SCORE_MATRIX_BYTES = 2**30


def ci_key(name: str, bound: str) -> str:
    """``ci_key("c2i_r1", "low") == "c2i_r1_ci_low"`` (``bound`` is "low" or "high")."""
    return f"{name}_ci_{bound}"


RECALL_NAMES = tuple(f"{d}_r{k}" for d in ("c2i", "i2c") for k in RECALL_KS)
RETRIEVAL_CI = tuple(ci_key(name, bound) for name in RECALL_NAMES for bound in ("low", "high"))


def _as_matrix(value: object, argument: str) -> torch.Tensor:
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(value)
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{argument} must be a torch.Tensor or numpy.ndarray, got {type(value).__name__}"
        )
    if value.ndim != 2 or value.shape[0] == 0:
        raise ValueError(
            f"{argument} must be a 2-D array with at least one row (items, dim), "
            f"got shape {tuple(value.shape)}"
        )
    return value.detach()


def _prepare(
    image_emb: Embeddings, caption_emb: Embeddings, captions_per_image: int, chunk_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validated (images, captions) on one device in one floating dtype."""
    if captions_per_image < 1:
        raise ValueError(f"captions_per_image must be >= 1, got {captions_per_image}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    images = _as_matrix(image_emb, "image_emb")
    captions = _as_matrix(caption_emb, "caption_emb")
    expected = (captions_per_image * images.shape[0], images.shape[1])
    if tuple(captions.shape) != expected:
        raise ValueError(
            f"caption_emb must have shape {expected} ({captions_per_image} captions per image "
            f"of image_emb's {tuple(images.shape)}), got shape {tuple(captions.shape)}"
        )
    # A numpy array joins the tensor's device; two tensors must already share one.
    if isinstance(image_emb, np.ndarray):
        images = images.to(captions.device)
    elif isinstance(caption_emb, np.ndarray):
        captions = captions.to(images.device)
    if images.device != captions.device:
        raise ValueError(f"image_emb is on {images.device} but caption_emb is on {captions.device}")
    dtype = torch.promote_types(images.dtype, captions.dtype)
    if dtype not in (torch.float32, torch.float64):  # half precision or integers
        dtype = torch.float32
    images, captions = images.to(dtype), captions.to(dtype)
    for tensor, argument in ((images, "image_emb"), (captions, "caption_emb")):
        if not bool(torch.isfinite(tensor).all()):
            # NaN scores compare false both ways and would give nonsense ranks.
            raise ValueError(f"{argument} contains NaN or infinite values")
    return images, captions


def _caption_to_image_ranks(
    images: torch.Tensor, captions: torch.Tensor, per_image: int, chunk_size: int
) -> torch.Tensor:
    """Rank of each caption's image among all images, chunked over caption queries."""
    owner = torch.arange(captions.shape[0], device=captions.device) // per_image
    ranks = torch.empty(captions.shape[0], dtype=torch.int64, device=captions.device)
    for start in range(0, captions.shape[0], chunk_size):
        stop = min(start + chunk_size, captions.shape[0])
        scores = captions[start:stop] @ images.T  # (chunk, N)
        # The correct score is read from the same matrix, so ties compare exactly.
        correct = scores.gather(1, owner[start:stop, None])
        ranks[start:stop] = (scores >= correct).sum(dim=1)
    return ranks


def _image_to_caption_ranks(
    images: torch.Tensor, captions: torch.Tensor, per_image: int, chunk_size: int
) -> torch.Tensor:
    """Best rank of each image's captions among all captions, chunked over image queries."""
    offsets = torch.arange(per_image, device=images.device)
    ranks = torch.empty(images.shape[0], dtype=torch.int64, device=images.device)
    for start in range(0, images.shape[0], chunk_size):
        stop = min(start + chunk_size, images.shape[0])
        scores = images[start:stop] @ captions.T  # (chunk, per_image * N)
        own = torch.arange(start, stop, device=images.device)[:, None] * per_image + offsets
        # min over own captions of 1 + #(wrong >= it) == 1 + #(wrong >= the best own one)
        own_scores = scores.gather(1, own)
        best = own_scores.max(dim=1, keepdim=True).values
        own_at_best = (own_scores >= best).sum(dim=1)
        ranks[start:stop] = 1 + (scores >= best).sum(dim=1) - own_at_best
    return ranks


def _ranks_from_one_matrix(
    images: torch.Tensor, captions: torch.Tensor, per_image: int, chunk_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Both directions' ranks from one ``(N, kN)`` score matrix, made and read in chunks
    of ``chunk_size`` image rows. The correct scores are read from that matrix, so
    ties compare exactly, as in the chunked functions above."""
    n, m = images.shape[0], captions.shape[0]
    scores = torch.empty(n, m, dtype=images.dtype, device=images.device)
    for start in range(0, n, chunk_size):
        torch.mm(
            images[start : start + chunk_size], captions.T, out=scores[start : start + chunk_size]
        )
    columns = torch.arange(m, device=images.device)
    correct = scores[columns // per_image, columns]  # each caption's own image's score
    # the image's own k columns on its row, (k, N); the best of them, and how many tie it
    own = scores.view(n, n, per_image).diagonal(dim1=0, dim2=1)
    best = own.amax(dim=0)
    own_at_best = (own >= best).sum(dim=0)
    c2i = torch.zeros(m, dtype=torch.int64, device=images.device)
    i2c = torch.empty(n, dtype=torch.int64, device=images.device)
    for start in range(0, n, chunk_size):
        block = scores[start : start + chunk_size]
        c2i += (block >= correct).sum(dim=0)
        stop = start + chunk_size
        i2c[start:stop] = 1 + (block >= best[start:stop, None]).sum(dim=1) - own_at_best[start:stop]
    return c2i, i2c


def retrieval_ranks(
    image_emb: Embeddings,
    caption_emb: Embeddings,
    captions_per_image: int = 5,
    *,
    chunk_size: int = 1024,
) -> tuple[np.ndarray, np.ndarray]:
    """1-based ranks ``(c2i_ranks (5N,), i2c_ranks (N,))`` as int64 numpy arrays.

    ``image_emb`` is ``(N, d)`` and ``caption_emb`` ``(captions_per_image * N, d)``,
    torch tensors (CPU or CUDA) or numpy arrays. Up to ``SCORE_MATRIX_BYTES`` of scores
    the ``N x 5N`` matrix is computed once for both directions; beyond that at most
    ``chunk_size`` queries are scored at a time, so memory stays at ``chunk_size x 5N``
    scores. A tie with the correct item counts against it (rank = 1 + #wrong candidates
    scoring greater than or equal to it; see the module docstring).
    """
    images, captions = _prepare(image_emb, caption_emb, captions_per_image, chunk_size)
    if images.shape[0] * captions.shape[0] * images.element_size() <= SCORE_MATRIX_BYTES:
        c2i, i2c = _ranks_from_one_matrix(images, captions, captions_per_image, chunk_size)
    else:
        c2i = _caption_to_image_ranks(images, captions, captions_per_image, chunk_size)
        i2c = _image_to_caption_ranks(images, captions, captions_per_image, chunk_size)
    return c2i.cpu().numpy(), i2c.cpu().numpy()


def summarise_ranks(c2i_ranks: np.ndarray, i2c_ranks: np.ndarray) -> dict[str, float]:
    """The ``names.RETRIEVAL`` metrics from 1-based ranks: R@K in percent (``hits * 100 /
    queries``), the median rank (``median_rank``: an integer) and the mean rank of each
    direction, and ``r10_mean``."""
    metrics: dict[str, float] = {}
    for direction, ranks in (("c2i", c2i_ranks), ("i2c", i2c_ranks)):
        ranks = np.asarray(ranks)
        for k in RECALL_KS:
            metrics[f"{direction}_r{k}"] = float(recall_at(ranks, k))
        metrics[f"{direction}_medr"] = float(median_rank(ranks))
        metrics[f"{direction}_meanr"] = float(np.mean(ranks))
    metrics["r10_mean"] = (metrics["c2i_r10"] + metrics["i2c_r10"]) / 2
    assert tuple(metrics) == names.RETRIEVAL  # the names are defined once, in names.py
    return metrics


def retrieval_metrics(
    image_emb: Embeddings,
    caption_emb: Embeddings,
    captions_per_image: int = 5,
    *,
    chunk_size: int = 1024,
) -> dict[str, float]:
    """Bidirectional retrieval metrics, keys ``names.RETRIEVAL`` (see the module docstring
    for the protocol and ``retrieval_ranks`` for the arguments)."""
    c2i, i2c = retrieval_ranks(image_emb, caption_emb, captions_per_image, chunk_size=chunk_size)
    return summarise_ranks(c2i, i2c)


def _with_ci(metrics: dict[str, float], n_images: int) -> dict[str, float]:
    out = dict(metrics)
    for name in RECALL_NAMES:
        out[ci_key(name, "low")], out[ci_key(name, "high")] = recall_ci(metrics[name], n_images)
    return out


def retrieval_metrics_with_ci(
    image_emb: Embeddings,
    caption_emb: Embeddings,
    captions_per_image: int = 5,
    *,
    chunk_size: int = 1024,
) -> dict[str, float]:
    """``retrieval_metrics`` plus a 95% interval for each R@K (keys ``RETRIEVAL_CI``,
    e.g. ``c2i_r1_ci_low``/``c2i_r1_ci_high``, in percent; see ``recall_ci``)."""
    metrics = retrieval_metrics(image_emb, caption_emb, captions_per_image, chunk_size=chunk_size)
    return _with_ci(metrics, len(image_emb))


def coco_1k(
    image_emb: Embeddings,
    caption_emb: Embeddings,
    *,
    folds: int = 5,
    captions_per_image: int = 5,
    chunk_size: int = 1024,
    with_ci: bool = False,
) -> dict[str, float]:
    """MSCOCO "1k": every metric averaged over ``folds`` contiguous folds of images (5
    folds of 1,000 images and their 5,000 captions on the 5,000-image test split).

    With ``with_ci``, intervals of the averaged R@K use n = all images (5,000), which
    reproduces the paper's Table 3.
    """
    images, captions = _prepare(image_emb, caption_emb, captions_per_image, chunk_size)
    if folds < 1 or images.shape[0] % folds:
        raise ValueError(
            f"image_emb must split into {folds} equal folds, got shape {tuple(images.shape)}"
        )
    size = images.shape[0] // folds
    if size != 1000:
        _log.warning("coco_1k: folds of %d images, not the standard 1,000", size)
    per_fold = [
        retrieval_metrics(
            images[f * size : (f + 1) * size],
            captions[f * size * captions_per_image : (f + 1) * size * captions_per_image],
            captions_per_image,
            chunk_size=chunk_size,
        )
        for f in range(folds)
    ]
    metrics = {name: float(np.mean([m[name] for m in per_fold])) for name in names.RETRIEVAL}
    return _with_ci(metrics, images.shape[0]) if with_ci else metrics


def coco_5k(
    image_emb: Embeddings,
    caption_emb: Embeddings,
    *,
    captions_per_image: int = 5,
    chunk_size: int = 1024,
    with_ci: bool = False,
) -> dict[str, float]:
    """MSCOCO "5k": the metrics on the whole (5,000-image) test split at once."""
    if len(image_emb) != 5000:
        _log.warning("coco_5k: %d images, not the standard 5,000", len(image_emb))
    metric_fn = retrieval_metrics_with_ci if with_ci else retrieval_metrics
    return metric_fn(image_emb, caption_emb, captions_per_image, chunk_size=chunk_size)
