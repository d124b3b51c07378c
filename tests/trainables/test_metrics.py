"""trainables.metrics against slow, obviously correct references on seeded data, and
against the paper's printed confidence intervals (Tables 2, 3 and 5)."""

from __future__ import annotations

import doctest
import logging
import math
import statistics

import numpy as np
import pytest
import scipy.stats
import torch

from trainables import metrics, names
from trainables.metrics import (
    RETRIEVAL_CI,
    coco_1k,
    coco_5k,
    pearson,
    pearson_ci,
    recall_ci,
    retrieval_metrics,
    retrieval_metrics_with_ci,
    retrieval_ranks,
    spearman,
)
from trainables.stats import CONSTANT_RTOL, average_ranks, correlations, is_constant

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def reference_ranks(images: np.ndarray, captions: np.ndarray, per_image: int = 5):
    """The protocol spelled out with loops over the full score matrix: a rank is 1 + the
    wrong candidates scoring at least the correct one's score."""
    scores = np.asarray(images, np.float64) @ np.asarray(captions, np.float64).T
    n_images, n_captions = scores.shape
    c2i = []
    for j in range(n_captions):
        correct = scores[j // per_image, j]
        c2i.append(1 + sum(scores[i, j] >= correct for i in range(n_images) if i != j // per_image))
    i2c = []
    for i in range(n_images):
        own = range(i * per_image, (i + 1) * per_image)
        wrong = [c for c in range(n_captions) if c not in own]
        i2c.append(min(1 + sum(scores[i, c] >= scores[i, j] for c in wrong) for j in own))
    return c2i, i2c


def reference_metrics(images: np.ndarray, captions: np.ndarray, per_image: int = 5):
    c2i, i2c = reference_ranks(images, captions, per_image)
    out = {}
    for direction, ranks in (("c2i", c2i), ("i2c", i2c)):
        for k in (1, 5, 10):
            out[f"{direction}_r{k}"] = 100 * sum(r <= k for r in ranks) / len(ranks)
        out[f"{direction}_medr"] = statistics.median_low(ranks)
        out[f"{direction}_meanr"] = sum(ranks) / len(ranks)
    out["r10_mean"] = (out["c2i_r10"] + out["i2c_r10"]) / 2
    return out


def random_pair(seed: int, n_images: int = 37, dim: int = 8, per_image: int = 5):
    rng = np.random.default_rng(seed)
    images = rng.normal(size=(n_images, dim))
    # captions near their image, so the ranks spread over the whole range
    captions = np.repeat(images, per_image, axis=0) + 1.5 * rng.normal(
        size=(per_image * n_images, dim)
    )
    return images, captions


def tied_pair(seed: int, n_images: int = 29, dim: int = 3):
    """Small integer embeddings: many exactly tied scores, exact in float32 too."""
    rng = np.random.default_rng(seed)
    images = rng.integers(-1, 2, size=(n_images, dim)).astype(np.float32)
    captions = rng.integers(-1, 2, size=(5 * n_images, dim)).astype(np.float32)
    return images, captions


def assert_metrics_equal(got: dict[str, float], expected: dict[str, float]) -> None:
    assert list(got) == list(names.RETRIEVAL)
    for name in names.RETRIEVAL:
        assert got[name] == pytest.approx(expected[name], abs=1e-9), name


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("chunk_size", [1, 7, 16, 1024])
def test_random_matches_reference(seed: int, chunk_size: int) -> None:
    images, captions = random_pair(seed)
    got = retrieval_metrics(images, captions, chunk_size=chunk_size)
    assert_metrics_equal(got, reference_metrics(images, captions))
    c2i, i2c = retrieval_ranks(images, captions, chunk_size=chunk_size)
    ref_c2i, ref_i2c = reference_ranks(images, captions)
    assert c2i.dtype == np.int64 and i2c.dtype == np.int64
    np.testing.assert_array_equal(c2i, ref_c2i)
    np.testing.assert_array_equal(i2c, ref_i2c)


@pytest.mark.parametrize("chunk_size", [1, 7, 1024])
def test_per_direction_chunks_beyond_the_score_matrix_budget(
    chunk_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics, "SCORE_MATRIX_BYTES", 0)  # never one N x 5N matrix
    for images, captions in (random_pair(0), tied_pair(1)):
        c2i, i2c = retrieval_ranks(images, captions, chunk_size=chunk_size)
        ref_c2i, ref_i2c = reference_ranks(images, captions)
        np.testing.assert_array_equal(c2i, ref_c2i)
        np.testing.assert_array_equal(i2c, ref_i2c)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("chunk_size", [3, 10, 1024])
def test_ties_count_against_the_query(seed: int, chunk_size: int) -> None:
    images, captions = tied_pair(seed)
    scores = images @ captions.T
    assert len(np.unique(scores)) < scores.size / 10  # really many ties
    got = retrieval_metrics(
        torch.from_numpy(images), torch.from_numpy(captions), chunk_size=chunk_size
    )
    assert_metrics_equal(got, reference_metrics(images, captions))


def test_tie_with_correct_item_counts_against_the_query() -> None:
    images = np.zeros((3, 2))  # every score is 0: all tied
    captions = np.zeros((15, 2))
    c2i, i2c = retrieval_ranks(images, captions)
    assert set(c2i) == {3} and set(i2c) == {11}  # after every wrong candidate


@pytest.mark.parametrize("chunk_size", [7, 1024])
@pytest.mark.parametrize(
    "collapsed",
    [
        pytest.param(lambda n, d: (np.ones((n, d)), np.ones((5 * n, d))), id="all-equal"),
        pytest.param(lambda n, d: (np.zeros((n, d)), np.zeros((5 * n, d))), id="all-zero"),
        pytest.param(
            lambda n, d: (np.tile([0.6, 0.8], (n, 1)), np.tile([0.6, 0.8], (5 * n, 1))),
            id="one-normalised-vector",
        ),
    ],
)
@pytest.mark.parametrize("score_matrix", [True, False])
def test_a_collapsed_model_never_scores_above_chance(
    collapsed, chunk_size: int, score_matrix: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model whose embeddings are all equal knows nothing: every correct item ties with
    every candidate and ranks last among them, so R@K = 0 (chance is K/N), never 100%."""
    if not score_matrix:
        monkeypatch.setattr(metrics, "SCORE_MATRIX_BYTES", 0)
    n = 100
    images, captions = collapsed(n, 2)
    got = retrieval_metrics(images, captions, chunk_size=chunk_size)
    for direction in ("c2i", "i2c"):
        for k in (1, 5, 10):
            assert got[f"{direction}_r{k}"] == 0.0 <= 100 * k / n
    assert got["r10_mean"] == 0.0
    assert got["c2i_medr"] == got["c2i_meanr"] == n  # after the n - 1 other images
    assert got["i2c_medr"] == got["i2c_meanr"] == 5 * n - 4  # after the 5n - 5 others
    assert_metrics_equal(got, reference_metrics(images, captions))


def test_one_distinct_caption_among_collapsed_ones_is_found_alone() -> None:
    """Ties only cost the tied: a model that separates one pair gets exactly that pair."""
    n = 20
    images, captions = np.zeros((n, 2)), np.zeros((5 * n, 2))
    images[3] = captions[15] = [1.0, 0.0]
    c2i, i2c = retrieval_ranks(images, captions)
    assert c2i[15] == 1 and i2c[3] == 1
    assert (c2i[np.arange(5 * n) != 15] == n).all()


def test_other_captions_per_image() -> None:
    images, captions = random_pair(4, n_images=20, per_image=2)
    got = retrieval_metrics(images, captions, captions_per_image=2, chunk_size=6)
    assert_metrics_equal(got, reference_metrics(images, captions, per_image=2))


def test_perfect_retrieval() -> None:
    images = np.eye(12)
    captions = np.repeat(images, 5, axis=0)
    got = retrieval_metrics(images, captions, chunk_size=5)
    for direction in ("c2i", "i2c"):
        for k in (1, 5, 10):
            assert got[f"{direction}_r{k}"] == 100.0
        assert got[f"{direction}_medr"] == got[f"{direction}_meanr"] == 1.0
    assert got["r10_mean"] == 100.0


def test_worst_retrieval() -> None:
    n = 12
    images = np.eye(n)
    captions = -np.repeat(images, 5, axis=0)  # own image scores -1, all others 0
    got = retrieval_metrics(images, captions, chunk_size=5)
    for direction in ("c2i", "i2c"):
        for k in (1, 5, 10):
            assert got[f"{direction}_r{k}"] == 0.0
    assert got["c2i_medr"] == got["c2i_meanr"] == n
    assert got["i2c_medr"] == got["i2c_meanr"] == 5 * n - 4  # best own caption after 5n-5
    assert got["r10_mean"] == 0.0


@pytest.mark.parametrize(
    ("ranks", "median"),
    [([1, 2, 7, 9], 2), ([4, 1], 1), ([3], 3), ([5, 1, 3], 3), ([2, 2, 8, 8], 2)],
)
def test_median_rank_is_the_lower_middle_integer(ranks: list[int], median: int) -> None:
    assert metrics.median_rank(np.array(ranks)) == median
    assert metrics.median_rank(np.array([ranks, ranks])).tolist() == [median, median]


def test_median_of_even_count_is_never_half() -> None:
    # 4 images: the two middle i2c ranks differ, and the lower one is reported
    for seed in range(20):
        images, captions = random_pair(seed, n_images=4, dim=3)
        _, i2c = retrieval_ranks(images, captions)
        got = retrieval_metrics(images, captions)["i2c_medr"]
        assert got == sorted(i2c)[1] and got == int(got)


def test_recall_reads_cleanly() -> None:
    """R@K is hits x 100 / N: 357 hits of 1,000 are 35.7 exactly as written."""
    ranks = np.array([1] * 357 + [50] * 643)
    got = metrics.summarise_ranks(np.repeat(ranks, 5), ranks)
    assert repr(got["i2c_r1"]) == "35.7" and repr(got["c2i_r10"]) == "35.7"
    assert repr(metrics.summarise_ranks(np.ones(3), np.array([1, 1, 9]))["i2c_r1"]) == (
        repr(2 * 100 / 3)
    )


def test_numpy_torch_and_mixed_inputs_agree() -> None:
    images, captions = random_pair(5)
    expected = retrieval_metrics(images, captions)
    as32 = (images.astype(np.float32), captions.astype(np.float32))
    assert_metrics_equal(
        retrieval_metrics(torch.from_numpy(images), torch.from_numpy(captions)), expected
    )
    assert_metrics_equal(retrieval_metrics(images, torch.from_numpy(captions)), expected)
    assert_metrics_equal(retrieval_metrics(*as32), retrieval_metrics(*map(torch.from_numpy, as32)))


def test_requires_grad_and_half_inputs() -> None:
    images, captions = tied_pair(9)
    expected = reference_metrics(images, captions)
    img = torch.from_numpy(images).requires_grad_()
    assert_metrics_equal(retrieval_metrics(img, torch.from_numpy(captions)), expected)
    half = (torch.from_numpy(images).half(), torch.from_numpy(captions).half())
    assert_metrics_equal(retrieval_metrics(*half), expected)  # small ints: exact in half


@cuda
@pytest.mark.parametrize("chunk_size", [7, 1024])
def test_cuda_matches_cpu(chunk_size: int) -> None:
    # exact across devices: the ranks of float64 scores of 8 terms (no TF32; no two within
    # round-off of each other for these seeds) and of small integers (every product exact)
    for images, captions in (random_pair(0), tied_pair(1)):
        cpu = retrieval_ranks(torch.from_numpy(images), torch.from_numpy(captions))
        gpu = retrieval_ranks(
            torch.from_numpy(images).cuda(),
            torch.from_numpy(captions).cuda(),
            chunk_size=chunk_size,
        )
        np.testing.assert_array_equal(cpu[0], gpu[0])
        np.testing.assert_array_equal(cpu[1], gpu[1])


@pytest.mark.parametrize(
    ("images", "captions", "kwargs", "message"),
    [
        (
            np.zeros((3, 4)),
            np.zeros((14, 4)),
            {},
            r"caption_emb must have shape \(15, 4\).*\(14, 4\)",
        ),
        (np.zeros((3, 4)), np.zeros((15, 5)), {}, r"caption_emb .*got shape \(15, 5\)"),
        (np.zeros(4), np.zeros((15, 4)), {}, r"image_emb must be a 2-D .*got shape \(4,\)"),
        (np.zeros((0, 4)), np.zeros((0, 4)), {}, r"image_emb .*at least one row"),
        (np.zeros((3, 4)), np.zeros((15, 4)), {"chunk_size": 0}, "chunk_size must be >= 1"),
        (np.zeros((3, 4)), np.zeros((3, 4)), {"captions_per_image": 0}, "captions_per_image"),
        (np.full((3, 4), np.nan), np.zeros((15, 4)), {}, "image_emb contains NaN"),
    ],
)
def test_bad_inputs(images, captions, kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        retrieval_metrics(images, captions, **kwargs)


def test_bad_input_type() -> None:
    message = r"image_emb must be a torch\.Tensor or numpy\.ndarray, got list"
    with pytest.raises(TypeError, match=message):
        retrieval_metrics([[0.0]], np.zeros((5, 1)))


def test_coco_1k_is_the_mean_over_contiguous_folds() -> None:
    images, captions = random_pair(11, n_images=40, dim=6)
    folds = [
        reference_metrics(images[f * 8 : (f + 1) * 8], captions[f * 40 : (f + 1) * 40])
        for f in range(5)
    ]
    got = coco_1k(images, captions, chunk_size=3)  # folds of 8 images
    expected = {name: sum(fold[name] for fold in folds) / 5 for name in names.RETRIEVAL}
    assert_metrics_equal(got, expected)
    assert got != retrieval_metrics(images, captions)  # folds really differ from the whole


def test_coco_1k_on_the_standard_5000_images(caplog: pytest.LogCaptureFixture) -> None:
    images, captions = random_pair(12, n_images=5000, dim=4)
    images_t = torch.from_numpy(images.astype(np.float32))
    captions_t = torch.from_numpy(captions.astype(np.float32))
    with caplog.at_level(logging.WARNING, logger="trainables.metrics"):
        one_k = coco_1k(images_t, captions_t)
    assert not caplog.records  # the standard fold size: no warning
    per_fold = [
        retrieval_metrics(
            images_t[f * 1000 : (f + 1) * 1000], captions_t[f * 5000 : (f + 1) * 5000]
        )
        for f in range(5)
    ]
    for name in names.RETRIEVAL:
        assert one_k[name] == pytest.approx(np.mean([m[name] for m in per_fold]), abs=1e-9)


def test_coco_shapes_and_warnings(caplog: pytest.LogCaptureFixture) -> None:
    message = r"image_emb must split into 5 equal folds, got shape \(12, 2\)"
    with pytest.raises(ValueError, match=message):
        coco_1k(np.eye(12, 2), np.zeros((60, 2)))
    with pytest.raises(ValueError, match=r"caption_emb must have shape \(50, 2\)"):
        coco_1k(np.eye(10, 2), np.zeros((60, 2)))
    images, captions = random_pair(13, n_images=10)
    with caplog.at_level(logging.WARNING, logger="trainables.metrics"):
        five_k = coco_5k(images, captions, chunk_size=4)
    assert "not the standard 5,000" in caplog.text
    assert five_k == retrieval_metrics(images, captions)
    assert coco_5k(images, captions, with_ci=True) == retrieval_metrics_with_ci(images, captions)


# The paper's retrieval tables: (R@K in percent, printed +-) with n = number of images.
TABLE_2_FLICKR8K = [  # n = 1,000 test images
    (11.8, 2.0),
    (32.1, 2.9),
    (44.7, 3.1),
    (16.5, 2.3),
    (40.6, 3.0),
    (54.2, 3.1),
    (20.3, 2.5),
    (47.6, 3.1),
    (61.7, 3.0),
    (24.8, 2.7),
    (53.7, 3.1),
    (67.1, 2.9),
    (21.2, 2.5),
    (50.0, 3.1),
    (64.8, 3.0),
    (31.0, 2.9),
    (59.3, 3.0),
    (73.7, 2.7),
    (26.9, 2.7),
    (69.6, 2.9),
    (32.4, 2.9),
    (73.6, 2.7),
    (36.3, 3.0),
    (66.4, 2.9),
    (78.2, 2.6),
    (27.5, 2.8),
    (58.2, 3.1),
    (70.5, 2.8),
    (38.5, 3.0),
    (68.9, 2.9),
    (79.3, 2.5),
]
TABLE_3_MSCOCO = [  # n = 5,000 test images, both for "1k" (5 folds) and "5k"
    (25.1, 1.2),
    (59.8, 1.4),
    (76.6, 1.2),
    (39.4, 1.4),
    (67.9, 1.3),
    (80.9, 1.1),
    (52.0, 1.4),
    (84.3, 1.0),
    (92.0, 0.8),
    (64.6, 1.3),
    (90.0, 0.8),
    (95.7, 0.6),
    (41.4, 1.4),
    (76.8, 1.2),
    (88.0, 0.9),
    (51.2, 1.4),
    (83.5, 1.0),
    (92.1, 0.7),
    (10.8, 0.9),
    (28.3, 1.2),
    (40.1, 1.4),
    (17.3, 1.0),
    (39.0, 1.4),
    (50.2, 1.4),
    (20.2, 1.1),
    (46.9, 1.4),
    (60.9, 1.4),
    (25.7, 1.2),
    (54.3, 1.4),
    (68.8, 1.3),
]


@pytest.mark.parametrize(("table", "n"), [(TABLE_2_FLICKR8K, 1000), (TABLE_3_MSCOCO, 5000)])
def test_recall_ci_reproduces_the_papers_retrieval_tables(table, n) -> None:
    for recall, half in table:
        low, high = recall_ci(recall, n)
        assert round(high - recall, 1) == half == round(recall - low, 1), recall


def test_recall_ci_edges() -> None:
    assert recall_ci(100.0, 50) == (100.0, 100.0)
    assert recall_ci(0.0, 50) == (0.0, 0.0)
    low, high = recall_ci(99.0, 10)  # would pass 100 unclipped
    assert high == 100.0 and low < 99.0
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        recall_ci(50.0, 0)


def test_retrieval_metrics_with_ci() -> None:
    images, captions = random_pair(3, n_images=40)
    got = retrieval_metrics_with_ci(images, captions)
    assert list(got) == [*names.RETRIEVAL, *RETRIEVAL_CI]
    for key in RETRIEVAL_CI:
        name = key.rsplit("_ci_", 1)[0]
        expected = recall_ci(got[name], 40)[0 if key.endswith("low") else 1]
        assert got[key] == expected
        assert 0.0 <= got[f"{name}_ci_low"] <= got[name] <= got[f"{name}_ci_high"] <= 100.0
    one_k = coco_1k(images, captions, with_ci=True)
    assert one_k["i2c_r10_ci_high"] == recall_ci(one_k["i2c_r10"], 40)[1]


# Table 5 of the paper: Pearson r x 100 (+ / -) for BOW, InferSent, char-GRU Flickr8k and
# char-GRU MSCOCO; n = the subtask's pair count from docs/protocols.md section 4.
TABLE_5 = {
    ("STS12", "MSRpar", 750): "42.3 5.7 6.1 | 40.0 5.8 6.2 | 49.1 5.2 5.6 | 37.6 6.0 6.3",
    ("STS12", "MSRvid", 750): "66.2 3.8 4.2 | 83.6 2.0 2.3 | 79.9 2.4 2.7 | 82.7 2.1 2.4",
    ("STS12", "SMTeuroparl", 459): "48.4 6.7 7.3 | 47.1 6.8 7.4 | 57.3 5.8 6.5 | 54.2 6.2 6.8",
    ("STS12", "surprise.OnWN", 750): "57.0 4.6 5.0 | 64.5 4.0 4.4 | 67.5 3.7 4.1 | 65.5 3.9 4.3",
    ("STS12", "surprise.SMTnews", 399): "46.3 7.4 8.1 | 60.7 5.9 6.6 | 51.1 6.9 7.6 | 38.7 8.0 8.7",
    ("STS13", "FNWN", 189): "38.2 11.6 12.9 | 34.5 12.0 13.2 | 23.8 13.0 13.9 | 23.2 13.1 14.0",
    ("STS13", "headlines", 750): "63.4 4.1 4.5 | 69.0 3.6 3.9 | 67.3 3.7 4.1 | 64.9 4.0 4.3",
    ("STS13", "OnWN", 561): "47.2 6.2 6.7 | 73.1 3.6 4.1 | 59.8 5.1 5.6 | 58.5 5.2 5.7",
    ("STS14", "deft-forum", 450): "30.0 8.2 8.7 | 47.5 6.9 7.5 | 50.7 6.6 7.2 | 51.5 6.5 7.1",
    ("STS14", "deft-news", 300): "65.0 6.1 7.1 | 72.9 4.9 5.8 | 67.8 5.7 6.6 | 65.3 6.0 7.0",
    ("STS14", "headlines", 750): "58.7 4.5 4.9 | 63.6 4.1 4.5 | 61.6 4.3 4.6 | 60.0 4.4 4.8",
    ("STS14", "images", 750): "62.4 4.2 4.6 | 80.9 2.3 2.6 | 81.4 2.3 2.6 | 88.2 1.5 1.7",
    ("STS14", "OnWN", 750): "57.7 4.6 5.0 | 77.3 2.7 3.1 | 68.6 3.6 4.0 | 68.1 3.7 4.0",
    ("STS14", "tweet-news", 750): "53.9 4.9 5.3 | 75.3 2.9 3.3 | 74.0 3.1 3.4 | 69.6 3.5 3.9",
    ("STS15", "answers-forums", 375): "36.7 8.4 9.1 | 61.3 6.0 6.7 | 57.6 6.4 7.2 | 49.4 7.3 8.1",
    ("STS15", "answers-students", 750): "63.6 4.1 4.5 | 68.6 3.6 4.0 | 68.8 3.6 4.0 | 67.1 3.8 4.1",
    ("STS15", "belief", 375): "44.8 7.7 8.5 | 71.8 4.6 5.3 | 71.8 4.6 5.3 | 66.5 5.3 6.1",
    ("STS15", "headlines", 750): "66.2 3.8 4.2 | 69.6 3.5 3.9 | 70.3 3.4 3.8 | 67.1 3.8 4.1",
    ("STS15", "images", 750): "69.1 3.6 3.9 | 85.5 1.8 2.1 | 89.2 1.4 1.6 | 88.1 1.5 1.7",
    ("STS16", "answer-answer", 254): "40.1 9.8 10.9 | 62.0 7.0 8.2 | 53.8 8.2 9.4 | 47.8 9.0 10.1",
    ("STS16", "headlines", 249): "61.4 7.2 8.4 | 68.8 6.0 7.2 | 70.0 5.8 6.9 | 65.4 6.6 7.7",
    ("STS16", "plagiarism", 230): "54.6 8.5 9.8 | 80.8 4.1 5.0 | 78.6 4.5 5.5 | 75.8 5.0 6.1",
    ("STS16", "postediting", 244): "53.9 8.3 9.6 | 82.3 3.7 4.5 | 84.4 3.3 4.0 | 79.7 4.2 5.1",
    (
        "STS16",
        "question-question",
        209,
    ): "47.2 9.9 11.3 | 63.3 7.5 8.9 | 40.5 10.8 12.0 | 49.9 9.5 10.9",
    ("STS-B", "test", 1379): "64.7 3.0 3.2 | 75.7 2.2 2.3 | 72.2 2.4 2.6 | 70.7 2.5 2.7",
    ("SICK-R", "test", 4927): "79.9 1.0 1.0 | 86.2 0.7 0.7 | 81.5 0.9 1.0 | 82.7 0.9 0.9",
}


@pytest.mark.parametrize("row", list(TABLE_5), ids=lambda row: f"{row[0]}/{row[1]}")
def test_pearson_ci_reproduces_table_5(row: tuple[str, str, int]) -> None:
    n = row[2]
    for cell in TABLE_5[row].split("|"):
        r100, plus, minus = (float(x) for x in cell.split())
        r = r100 / 100
        low, high = pearson_ci(r, n)
        assert (round(100 * (high - r), 1), round(100 * (r - low), 1)) == (plus, minus), cell


def test_pearson_ci_spec_examples_and_edges() -> None:
    assert pearson_ci(0.722, 1379) == pytest.approx((0.6958, 0.7464), abs=1e-4)
    low, high = pearson_ci(-0.3, 100)
    assert low == pytest.approx(math.tanh(math.atanh(-0.3) - 1.96 / math.sqrt(97)))
    assert high == pytest.approx(math.tanh(math.atanh(-0.3) + 1.96 / math.sqrt(97)))
    assert pearson_ci(1.0, 10) == (1.0, 1.0)
    assert all(math.isnan(v) for v in pearson_ci(math.nan, 10))
    with pytest.raises(ValueError, match="n must be > 3"):
        pearson_ci(0.5, 3)
    with pytest.raises(ValueError, match=r"r must lie in \[-1, 1\], got 1.5"):
        pearson_ci(1.5, 10)


@pytest.mark.parametrize("seed", range(4))
def test_correlations_match_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=200)
    y = x + rng.normal(size=200)
    tied = np.round(y)  # ties: Spearman needs average ranks
    assert pearson(x, y) == pytest.approx(scipy.stats.pearsonr(x, y)[0], abs=1e-12)
    assert spearman(x, tied) == pytest.approx(scipy.stats.spearmanr(x, tied)[0], abs=1e-12)
    assert pearson(torch.from_numpy(x), list(y)) == pytest.approx(pearson(x, y), abs=1e-12)


@pytest.mark.parametrize(
    "values", [[3.0, 1.0, 2.0], [2.0, 2.0, 2.0], [1.0, 2.0, 2.0, 1.0, 5.0, 2.0], []]
)
def test_average_ranks_are_scipys(values: list[float]) -> None:
    rng = np.random.default_rng(len(values))
    for x in (np.array(values), np.round(rng.normal(size=300), 1)):
        np.testing.assert_array_equal(average_ranks(x), scipy.stats.rankdata(x))


def test_correlations_of_constant_input_are_nan() -> None:
    assert math.isnan(pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))
    assert math.isnan(spearman([1.0, 2.0, 3.0], [2.0, 2.0, 2.0]))
    with pytest.raises(ValueError, match="equal length >= 2"):
        pearson([1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="equal length >= 2"):
        spearman([1.0], [2.0])


def _round_off_spread(value: float, n: int, seed: int) -> np.ndarray:
    """``n`` copies of ``value`` as a float32 model gives them for identical inputs: each
    a float32 ulp or two off (2e-7 at 3.0, as torch 2.14.1's CPU kernels give the
    relatedness predictions), read as float64."""
    noise = np.random.default_rng(seed).uniform(-2.4e-7, 2.4e-7, n)  # two ulps: 2**-22
    return (value * (1 + noise)).astype(np.float32).astype(np.float64)


@pytest.mark.parametrize("value", [3.0, -2.8405664, 1e4, 0.25])
def test_a_round_off_spread_is_constant(value: float, caplog: pytest.LogCaptureFixture) -> None:
    predicted = _round_off_spread(value, 50, seed=1)
    assert np.ptp(predicted) > 0  # not exactly equal: what the exact test missed
    gold = np.random.default_rng(2).uniform(1, 5, 50)
    assert is_constant(predicted) and is_constant(torch.from_numpy(predicted).float())
    assert math.isnan(pearson(predicted, gold)) and math.isnan(pearson(gold, predicted))
    assert math.isnan(spearman(predicted, gold)) and math.isnan(spearman(gold, predicted))
    with caplog.at_level(logging.WARNING, logger="trainables.stats"):
        assert correlations(predicted, gold, "SICK-R/test") == (0.0, 0.0)
        assert correlations(gold, predicted, "gold") == (0.0, 0.0)
    assert "SICK-R/test: constant predictions" in caplog.text


@pytest.mark.parametrize("scale", [1e-6, 1e-12, 1e-30, 1.0, 1e6])
def test_small_or_large_values_that_vary_are_not_constant(scale: float) -> None:
    """Constant is relative to the values' magnitude: tiny values that really vary vary."""
    rng = np.random.default_rng(3)
    gold = rng.uniform(1, 5, 60)
    predicted = scale * (gold + rng.normal(0, 0.5, 60))  # of order 1e-6 at scale 1e-6
    assert not is_constant(predicted)
    expected = scipy.stats.pearsonr(predicted, gold)[0]
    assert pearson(predicted, gold) == pytest.approx(expected, abs=1e-12)
    assert correlations(predicted, gold) == pytest.approx(
        (expected, scipy.stats.spearmanr(predicted, gold)[0]), abs=1e-12
    )
    assert expected > 0.5


def test_truly_constant_input_and_what_constant_means() -> None:
    assert is_constant([0.0, 0.0]) and is_constant(np.full(5, -7.5)) and is_constant([4.0])
    assert correlations(np.full(10, 2.0), np.arange(10.0)) == (0.0, 0.0)
    assert correlations(np.zeros(10), np.arange(10.0)) == (0.0, 0.0)
    # the bound: a spread of CONSTANT_RTOL * max|x|, inclusive; atol widens it
    assert is_constant([1.0, 1.0 - CONSTANT_RTOL / 2])
    assert not is_constant([1.0, 1.0 - 2 * CONSTANT_RTOL])
    assert not is_constant([0.0, 1e-9]) and is_constant([0.0, 1e-9], atol=1e-8)
    assert is_constant([1.0, 1.001], rtol=1e-2) and not is_constant([1.0, np.nan, 1.0])


def test_docstring_examples_run() -> None:
    result = doctest.testmod(metrics)
    assert result.attempted > 0 and result.failed == 0
