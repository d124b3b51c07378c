"""trainables.relatedness, SentEval's supervised protocol: the target encoding against
SPEC section 5's formula, the training step against autograd and torch's Adam, the rounds
and their stopping rule, and what it learns on synthetic tasks."""

from __future__ import annotations

import doctest
import logging
import math

import numpy as np
import pytest
import torch

from storage.senteval import SentencePairs, SupervisedTask
from trainables import relatedness
from trainables.relatedness import (
    N_CLASSES,
    RelatednessProtocol,
    _Adam,
    _fit,
    _gradient,
    from_class_scale,
    predict_relatedness,
    relatedness_targets,
    supervised_relatedness,
    to_class_scale,
)

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def spec_targets(scores: np.ndarray) -> np.ndarray:
    """SPEC section 5, written out: for a score y, ``p[floor(y)] = y - floor(y)`` and
    ``p[floor(y) - 1] = floor(y) - y + 1``, 0-based classes for scores 1..5, positions
    outside the five classes dropped; nothing else (SentEval's ``encode_labels``)."""
    out = np.zeros((len(scores), N_CLASSES))
    for row, y in enumerate(scores):
        for i in range(N_CLASSES):
            if i == math.floor(y):
                out[row, i] = y - math.floor(y)
            if i == math.floor(y) - 1:
                out[row, i] = math.floor(y) - y + 1
    return out


def test_senteval_encoding_is_specs_formula_scores_below_one_included() -> None:
    rng = np.random.default_rng(0)
    scores = np.concatenate([[0.0, 0.4, 0.999, 1.0, 2.5, 4.75, 5.0], rng.uniform(0, 5, 500)])
    assert (scores < 1).sum() > 50
    got = relatedness_targets(scores, (0.0, 5.0))  # the default: "senteval"
    np.testing.assert_allclose(got, spec_targets(scores), atol=1e-12)
    below = scores < 1
    # a score below 1 puts mass y on the first class only: the target sums to y < 1
    np.testing.assert_allclose(got[below].sum(axis=1), scores[below], atol=1e-12)
    np.testing.assert_allclose(got[below][:, 1:], 0.0)
    np.testing.assert_allclose(got[~below].sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(got[~below] @ np.arange(1, 6), scores[~below], atol=1e-12)


@pytest.mark.parametrize(
    ("score", "score_range", "encoding", "expected"),
    [
        (3.4, (1.0, 5.0), "senteval", [0, 0, 0.6, 0.4, 0]),
        (1.0, (1.0, 5.0), "senteval", [1, 0, 0, 0, 0]),
        (4.75, (1.0, 5.0), "rescaled", [0, 0, 0, 0.25, 0.75]),  # SICK-R: the same either way
        (0.0, (0.0, 5.0), "senteval", [0, 0, 0, 0, 0]),  # STS-B 0: no mass at all
        (0.4, (0.0, 5.0), "senteval", [0.4, 0, 0, 0, 0]),
        (2.5, (0.0, 5.0), "senteval", [0, 0.5, 0.5, 0, 0]),
        (0.0, (0.0, 5.0), "rescaled", [1, 0, 0, 0, 0]),  # [0, 5] -> [1, 5]: 0 -> 1
        (0.4, (0.0, 5.0), "rescaled", [0.68, 0.32, 0, 0, 0]),  # -> 1.32
        (2.5, (0.0, 5.0), "rescaled", [0, 0, 1, 0, 0]),  # -> 3
        (5.0, (0.0, 5.0), "rescaled", [0, 0, 0, 0, 1]),
    ],
)
def test_targets_by_hand(score, score_range, encoding, expected) -> None:
    target = relatedness_targets(np.array([score]), score_range, encoding)
    np.testing.assert_allclose(target, [expected], atol=1e-12)


def test_rescaled_targets_are_distributions_that_map_back() -> None:
    scores = np.random.default_rng(1).uniform(0, 5, 200)
    target = relatedness_targets(scores, (0.0, 5.0), "rescaled")
    np.testing.assert_allclose(target.sum(axis=1), 1.0)
    class_scores = to_class_scale(scores, (0.0, 5.0))
    np.testing.assert_allclose(target @ np.arange(1, 6), class_scores)
    np.testing.assert_allclose(from_class_scale(class_scores, (0.0, 5.0)), scores)


def test_bad_scores_and_encodings_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"scores must lie in \(1.0, 5.0\), got \[0.5, 3.0\]"):
        relatedness_targets(np.array([0.5, 3.0]), (1.0, 5.0))
    with pytest.raises(ValueError, match="stsb_encoding: got 'raw'"):
        relatedness_targets(np.array([3.0]), (1.0, 5.0), "raw")


def test_training_step_matches_autograd_and_torch_adam() -> None:
    """The hand-written step against SentEval's model: Linear + Softmax, summed MSE, Adam."""
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.normal(size=(64, 9))).float()
    x[:, -1] = 1.0  # the bias column
    target = torch.from_numpy(relatedness_targets(rng.uniform(0, 5, 64), (0.0, 5.0))).float()
    linear = torch.nn.Linear(8, 5)
    weights = torch.cat([linear.weight, linear.bias[:, None]], dim=1).detach().clone()
    optimizer = torch.optim.Adam(linear.parameters(), lr=1e-3)
    adam = _Adam(weights, lr=1e-3)
    for step in range(30):
        batch = slice(2 * step, 2 * step + 34)
        loss = torch.nn.functional.mse_loss(
            torch.softmax(linear(x[batch, :-1]), dim=1), target[batch], reduction="sum"
        )
        optimizer.zero_grad()
        loss.backward()
        expected_grad = torch.cat([linear.weight.grad, linear.bias.grad[:, None]], dim=1)
        grad = _gradient(weights, x[batch], target[batch])
        torch.testing.assert_close(grad, expected_grad, rtol=1e-5, atol=1e-6)
        optimizer.step()
        adam.step(grad)
    expected = torch.cat([linear.weight, linear.bias[:, None]], dim=1).detach()
    torch.testing.assert_close(weights, expected, rtol=1e-5, atol=1e-6)


def synthetic_task(
    seed: int,
    *,
    learnable: bool,
    dim: int = 12,
    name: str = "SICK-R",
    sizes: tuple[int, int, int] = (600, 150, 400),
):
    """Random sentence embeddings; gold scores a linear function of the features
    [|u - v|, u * v] rescaled into the score range, or independent random scores."""
    rng = np.random.default_rng(seed)
    score_range = (1.0, 5.0) if name == "SICK-R" else (0.0, 5.0)
    weights = rng.normal(size=2 * dim)
    vectors: dict[str, np.ndarray] = {}
    splits = []
    for split, n in zip(("train", "dev", "test"), sizes, strict=True):
        s1 = tuple(f"{split} {i} a" for i in range(n))
        s2 = tuple(f"{split} {i} b" for i in range(n))
        u, v = rng.normal(size=(n, dim)), rng.normal(size=(n, dim))
        vectors.update(zip(s1, u, strict=True))
        vectors.update(zip(s2, v, strict=True))
        score = np.c_[np.abs(u - v), u * v] @ weights if learnable else rng.normal(size=n)
        splits.append((s1, s2, score))
    everything = np.concatenate([score for _, _, score in splits])
    low, high = score_range
    pairs = [
        SentencePairs(
            f"{name}/{split}",
            s1,
            s2,
            low + (high - low) * (score - everything.min()) / np.ptp(everything),
        )
        for split, (s1, s2, score) in zip(("train", "dev", "test"), splits, strict=True)
    ]
    task = SupervisedTask(name, *pairs, score_range=score_range)
    return task, lambda sentences: torch.from_numpy(np.stack([vectors[s] for s in sentences]))


def test_learns_a_linear_function_of_the_features() -> None:
    task, embed = synthetic_task(0, learnable=True)
    got = supervised_relatedness(embed, task)
    assert set(got) == {"sickr_pearson", "sickr_spearman", "sickr_mse"}
    assert got["sickr_pearson"] > 0.8 and got["sickr_spearman"] > 0.8
    assert got["sickr_mse"] < 0.5


def test_random_scores_give_no_correlation() -> None:
    task, embed = synthetic_task(1, learnable=False)
    got = supervised_relatedness(embed, task)
    assert abs(got["sickr_pearson"]) < 0.15


@pytest.mark.parametrize("encoding", ["senteval", "rescaled"])
def test_stsb_both_encodings_learn_and_report_on_the_gold_scale(encoding: str) -> None:
    task, embed = synthetic_task(2, learnable=True, name="STS-B")
    assert task.train.gold.min() == 0.0 and (task.train.gold < 1).mean() > 0.02
    got = supervised_relatedness(embed, task, encoding=encoding)
    assert set(got) == {"stsb_pearson", "stsb_spearman", "stsb_mse"}
    assert got["stsb_pearson"] > 0.8
    predicted = predict_relatedness(embed, task, encoding=encoding)
    assert got["stsb_mse"] == pytest.approx(float(np.mean((predicted - task.test.gold) ** 2)))
    if encoding == "senteval":  # SentEval's expected score, compared as it is: in [1, 5]
        assert predicted.min() >= 1.0 - 1e-9 and predicted.max() <= 5.0 + 1e-9
    else:  # mapped back from [1, 5] onto [0, 5]
        assert predicted.min() >= -1e-9 and predicted.max() <= 5.0 + 1e-9


def test_the_encodings_differ_where_scores_fall_below_one() -> None:
    task, embed = synthetic_task(2, learnable=True, name="STS-B")
    senteval = predict_relatedness(embed, task, encoding="senteval")
    rescaled = predict_relatedness(embed, task, encoding="rescaled")
    assert not np.allclose(senteval, rescaled)


def test_deterministic_for_a_seed() -> None:
    task, embed = synthetic_task(3, learnable=True, sizes=(200, 60, 100))
    protocol = RelatednessProtocol(max_epoch=100)
    first = supervised_relatedness(embed, task, seed=7, protocol=protocol)
    assert supervised_relatedness(embed, task, seed=7, protocol=protocol) == first
    assert supervised_relatedness(embed, task, seed=8, protocol=protocol) != first


def test_at_most_21_rounds_as_senteval(caplog: pytest.LogCaptureFixture) -> None:
    """SentEval starts a round while at most 1,000 epochs are done: 21 rounds, 1,050
    epochs, when the dev Pearson keeps improving."""
    task, embed = synthetic_task(4, learnable=True, sizes=(64, 40, 20))
    patient = RelatednessProtocol(patience=10**6, epochs_per_round=1)
    with caplog.at_level(logging.DEBUG, logger="trainables.relatedness"):
        supervised_relatedness(embed, task, protocol=patient)
    assert "SICK-R: 1001 epochs" in caplog.text  # rounds of 1 epoch: 0, 1, ..., 1000
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="trainables.relatedness"):
        supervised_relatedness(embed, task, protocol=RelatednessProtocol(patience=10**6))
    assert "SICK-R: 1050 epochs" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="trainables.relatedness"):
        supervised_relatedness(embed, task, protocol=RelatednessProtocol(max_epoch=100))
    assert "SICK-R: 150 epochs" in caplog.text  # rounds starting at 0, 50 and 100


def test_constant_predictions_keep_the_first_round_and_warn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    task, _ = synthetic_task(4, learnable=False, sizes=(100, 40, 50))
    constant = lambda sentences: torch.ones(len(sentences), 3)  # noqa: E731
    with caplog.at_level(logging.DEBUG, logger="trainables.relatedness"):
        got = supervised_relatedness(constant, task)
    # a NaN dev Pearson counts as 0: the first round is the best, 4 more miss
    assert "SICK-R: 250 epochs" in caplog.text
    assert "kept the first round's model, as SentEval does" in caplog.text
    assert got["sickr_pearson"] == got["sickr_spearman"] == 0.0
    assert "SICK-R/test: constant predictions" in caplog.text
    assert math.isfinite(got["sickr_mse"])


def test_a_nan_dev_pearson_keeps_the_first_rounds_weights(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Constant dev gold scores: every round's dev Pearson is NaN; the weights returned
    are those after the first round (not the untrained ones, nor the last)."""
    rng = np.random.default_rng(5)
    x = torch.from_numpy(np.c_[rng.normal(size=(80, 6)), np.ones(80)])
    target = torch.from_numpy(relatedness_targets(rng.uniform(1, 5, 80), (1.0, 5.0)))
    dev = (x[:20], torch.full((20,), 3.0, dtype=torch.float64))

    def fit(protocol: RelatednessProtocol) -> torch.Tensor:
        return _fit((x, target), dev, protocol, torch.Generator().manual_seed(0), "const")

    with caplog.at_level(logging.WARNING, logger="trainables.relatedness"):
        kept = fit(RelatednessProtocol(epochs_per_round=5))
    first_round_only = fit(RelatednessProtocol(epochs_per_round=5, max_epoch=0))
    torch.testing.assert_close(kept, first_round_only)
    assert "every one of 5 rounds" in caplog.text


@cuda
def test_cuda_runs_and_matches_cpu() -> None:
    task, embed = synthetic_task(5, learnable=True, sizes=(300, 80, 200))
    cpu = supervised_relatedness(embed, task)
    gpu = supervised_relatedness(embed, task, device="cuda")
    assert gpu["sickr_pearson"] == pytest.approx(cpu["sickr_pearson"], abs=0.02)


def test_one_cpu_thread_during_the_fit_and_restored_after() -> None:
    task, _ = synthetic_task(6, learnable=True, sizes=(64, 20, 20))
    seen: list[int] = []

    def embed(sentences):  # called inside the fit's thread setting
        seen.append(torch.get_num_threads())
        return torch.ones(len(sentences), 3) + torch.arange(len(sentences))[:, None]

    before = torch.get_num_threads()
    supervised_relatedness(embed, task, protocol=RelatednessProtocol(max_epoch=0), threads=1)
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == before


def test_docstring_examples_run() -> None:
    result = doctest.testmod(relatedness)
    assert result.attempted > 0 and result.failed == 0
