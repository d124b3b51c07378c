"""trainables.relatedness, SentEval's supervised protocol: the target encoding against
docs/protocols.md section 5's formula, the training step against autograd and torch's
Adam, the rounds and their stopping rule, what it learns on synthetic tasks, and both
engines against an independent SentEval-style reference (nn.Linear + Softmax,
MSELoss(sum), torch's Adam) on the same shuffles."""

from __future__ import annotations

import copy
import doctest
import logging
import math
from typing import Any

import numpy as np
import pytest
import scipy.stats
import torch

from bench._relatedness_loop import _Adam, _gradient, fit_loop
from storage.senteval import SentencePairs, SupervisedTask
from trainables import relatedness
from trainables.relatedness import (
    N_CLASSES,
    RelatednessProtocol,
    Task,
    expected_score,
    fit_batched,
    from_class_scale,
    predict_relatedness,
    predict_relatedness_tasks,
    relatedness_targets,
    supervised_relatedness_tasks,
    to_class_scale,
)


def supervised_relatedness(
    embed: relatedness.Lookup, task: SupervisedTask, *, encoding: str = "senteval", **options: Any
) -> dict[str, float]:
    """One task's metrics: ``supervised_relatedness_tasks`` of ``[task]``."""
    return supervised_relatedness_tasks(embed, [task], encodings={task.name: encoding}, **options)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def spec_targets(scores: np.ndarray) -> np.ndarray:
    """docs/protocols.md section 5, written out: for a score y, ``p[floor(y)] = y - floor(y)`` and
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


def test_constant_predictions_a_float32_ulp_apart_are_constant(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """What torch 2.14.1's CPU kernels give for identical test pairs: the same prediction
    but for one float32 ulp here and there (2e-7 at 2.8). They are constant predictions
    (correlations 0.0 and the warning), not a correlation of round-off (Pearson -0.18)."""
    task, _ = synthetic_task(4, learnable=False, sizes=(100, 40, 50))
    constant = lambda sentences: torch.ones(len(sentences), 3)  # noqa: E731
    exact = relatedness.correlations
    seen: list[np.ndarray] = []

    def on_one_ulp_apart(pred: np.ndarray, gold: np.ndarray, what: str) -> tuple[float, float]:
        jittered = pred.astype(np.float32)  # the test predictions, as this machine made them
        jittered[::3] = np.nextafter(jittered[::3], np.float32(np.inf))
        seen.append(jittered.astype(np.float64))
        return exact(seen[-1], gold, what)

    monkeypatch.setattr(relatedness, "correlations", on_one_ulp_apart)
    with caplog.at_level(logging.WARNING, logger="trainables.stats"):
        got = supervised_relatedness(constant, task)
    assert len(seen) == 1 and np.ptp(seen[0]) > 0  # not exactly constant
    assert got["sickr_pearson"] == got["sickr_spearman"] == 0.0
    assert "SICK-R/test: constant predictions" in caplog.text


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
        generator = torch.Generator().manual_seed(0)
        (weights,) = protocol.fitted([Task("const", x, target, *dev, generator)])
        return weights

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


# -- the engines against SentEval's protocol written out ------------------------------


def senteval_reference(
    train: tuple[torch.Tensor, torch.Tensor],
    dev: tuple[torch.Tensor, np.ndarray],
    test_x: torch.Tensor,
    generator: torch.Generator,
    protocol: RelatednessProtocol = relatedness.SENTEVAL,
) -> np.ndarray:
    """SentEval's ``RelatednessPytorch.run`` (``senteval/tools/relatedness.py``) written
    out independently with torch.nn, as the module docstring describes it: ``nn.Linear``
    + ``nn.Softmax``, ``nn.MSELoss`` summed, ``torch.optim.Adam`` (no weight decay),
    rounds of 50 epochs of batch 64 over a fresh permutation, the dev Pearson of
    ``proba . [1..5]`` (NaN as 0) after each, the best model deep-copied, stopping at the
    4th round that does not beat the best or once more than 1,000 epochs are done. Only
    the randomness is ours: the initial weights and the permutations come from
    ``generator`` in the engines' order (SentEval's come from numpy's and torch's global
    seeds), so that both see the same shuffles. ``train[0]`` etc. carry no ones column."""
    x, target = train
    dim = x.shape[1]
    model = torch.nn.Sequential(torch.nn.Linear(dim, N_CLASSES), torch.nn.Softmax(dim=-1))
    model = model.to(x.dtype)
    bound = 1 / math.sqrt(dim)
    init = torch.rand(N_CLASSES, dim + 1, generator=generator, dtype=torch.float64) * 2 - 1
    init = init * bound
    with torch.no_grad():
        model[0].weight.copy_(init[:, :-1])
        model[0].bias.copy_(init[:, -1])
    loss_fn = torch.nn.MSELoss(reduction="sum")
    optimizer = torch.optim.Adam(model.parameters(), lr=protocol.lr, weight_decay=0.0)
    r = np.arange(1, 6)
    nepoch, bestpr, early_stop_count, stop_train, bestmodel = 0, -1.0, 0, False, None
    while not stop_train and nepoch <= protocol.max_epoch:
        for _ in range(protocol.epochs_per_round):
            permutation = torch.randperm(len(x), generator=generator)
            for i in range(0, len(x), protocol.batch_size):
                idx = permutation[i : i + protocol.batch_size]
                loss = loss_fn(model(x[idx]), target[idx])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        nepoch += protocol.epochs_per_round
        with torch.no_grad():
            yhat = model(dev[0]).numpy() @ r
        pr = scipy.stats.pearsonr(yhat, dev[1])[0]
        pr = 0 if pr != pr else pr
        if pr > bestpr:
            bestpr, bestmodel = pr, copy.deepcopy(model)
        else:
            if early_stop_count >= protocol.patience - 1:
                stop_train = True
            early_stop_count += 1
    assert bestmodel is not None
    with torch.no_grad():
        return bestmodel(test_x).numpy() @ r


def float64_problem(task: SupervisedTask, embed, encoding: str = "senteval"):
    """A task's features (with and without the ones column), targets and gold scores in
    float64 on the CPU."""

    def features(pairs: SentencePairs) -> torch.Tensor:
        u, v = embed(pairs.sentences1).double(), embed(pairs.sentences2).double()
        return torch.cat([(u - v).abs(), u * v], dim=1)

    def with_ones(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], dim=1)

    target = torch.from_numpy(relatedness_targets(task.train.gold, task.score_range, encoding))
    train, dev, test = (features(p) for p in (task.train, task.dev, task.test))
    return {
        "bare": ((train, target), (dev, task.dev.gold), test),
        "ours": (
            (with_ones(train), target),
            (with_ones(dev), torch.from_numpy(task.dev.gold.copy())),
            with_ones(test),
        ),
    }


SMALL_ROUNDS = RelatednessProtocol(epochs_per_round=10, max_epoch=80)


@pytest.fixture
def one_thread():
    """One torch thread, as ``predict_relatedness`` runs the fit (these tests call the
    engines directly): with two, a busy 2-core machine makes the 64-row steps 20-40x
    slower (BENCHMARKS.md)."""
    with relatedness.cpu_threads(1, "cpu"):
        yield


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("name", ["SICK-R", "STS-B"])
def test_both_engines_match_a_senteval_style_reference_in_float64(name: str) -> None:
    """Same seed, same shuffles: the loop engine, the batched engine alone and the
    batched engine beside another task predict what the nn.Linear + Adam reference does,
    to float64 rounding."""
    task, embed = synthetic_task(10, learnable=True, name=name, sizes=(200, 60, 80))
    other, other_embed = synthetic_task(11, learnable=True, sizes=(170, 50, 60))
    problem = float64_problem(task, embed)
    train, dev, test_x = problem["bare"]
    expected = senteval_reference(
        train, dev, test_x, torch.Generator().manual_seed(3), SMALL_ROUNDS
    )
    (ours_train, ours_dev, ours_test) = problem["ours"]
    loop = fit_loop(
        [Task(name, *ours_train, *ours_dev, torch.Generator().manual_seed(3))], SMALL_ROUNDS
    )[0]
    alone = fit_batched(
        [Task(name, *ours_train, *ours_dev, torch.Generator().manual_seed(3))], SMALL_ROUNDS
    )[0]
    o_train, o_dev, _ = float64_problem(other, other_embed)["ours"]
    beside = fit_batched(
        [
            Task("other", *o_train, *o_dev, torch.Generator().manual_seed(5)),
            Task(name, *ours_train, *ours_dev, torch.Generator().manual_seed(3)),
        ],
        SMALL_ROUNDS,
    )[1]
    for weights in (loop, alone, beside):
        assert weights.dtype == torch.float64
        got = expected_score(weights, ours_test).numpy()
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9)


@pytest.mark.usefixtures("one_thread")
def test_tasks_trained_together_stop_on_their_own_and_equal_training_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Three tasks of different sizes (so different batches per epoch, each with a
    short last batch), one of them unlearnable (it stops after the fewest rounds): each
    task's weights, trained in one stack, are those it gets alone, in float64."""
    protocol = RelatednessProtocol(epochs_per_round=4, patience=2, max_epoch=60)
    specs = [(20, True, (200, 60, 10)), (21, False, (130, 60, 10)), (22, True, (70, 60, 10))]
    problems = []
    for seed, learnable, sizes in specs:
        task, embed = synthetic_task(seed, learnable=learnable, sizes=sizes)
        problems.append(float64_problem(task, embed)["ours"])

    def tasks(indices):
        return [
            Task(f"task {i}", *problems[i][0], *problems[i][1], torch.Generator().manual_seed(i))
            for i in indices
        ]

    with caplog.at_level(logging.DEBUG, logger="trainables.relatedness"):
        together = fit_batched(tasks([0, 1, 2]), protocol)
    epochs = {
        line.split(":")[-2].strip(): int(line.split(": ")[-1].split()[0])
        for line in caplog.text.splitlines()
        if "epochs, best dev Pearson" in line
    }
    assert len(set(epochs.values())) > 1, epochs  # they did not all stop together
    for i in range(3):
        alone = fit_batched(tasks([i]), protocol)[0]
        loop = fit_loop(tasks([i]), protocol)[0]
        torch.testing.assert_close(together[i], alone, rtol=0, atol=1e-12)
        torch.testing.assert_close(together[i], loop, rtol=0, atol=1e-10)


def prefixed(task: SupervisedTask, embed, prefix: str):
    """``task`` with every sentence prefixed (synthetic tasks share sentence strings),
    and its embed function for the prefixed sentences."""

    def pairs(p: SentencePairs) -> SentencePairs:
        return SentencePairs(
            p.name,
            tuple(prefix + s for s in p.sentences1),
            tuple(prefix + s for s in p.sentences2),
            p.gold,
        )

    renamed = SupervisedTask(
        task.name, pairs(task.train), pairs(task.dev), pairs(task.test), task.score_range
    )
    return renamed, lambda sentences: embed([s.removeprefix(prefix) for s in sentences])


def two_tasks(sizes=((300, 80, 100), (250, 70, 90)), seeds=(30, 31)):
    """A SICK-R and an STS-B synthetic task with distinct sentences, their own embed
    functions, and one embed function for both."""
    sick, sick_embed = prefixed(*synthetic_task(seeds[0], learnable=True, sizes=sizes[0]), "s:")
    stsb, stsb_embed = prefixed(
        *synthetic_task(seeds[1], learnable=True, name="STS-B", sizes=sizes[1]), "b:"
    )

    def both(sentences):
        return torch.stack(
            [(sick_embed if s.startswith("s:") else stsb_embed)([s])[0] for s in sentences]
        )

    return sick, stsb, {"SICK-R": sick_embed, "STS-B": stsb_embed}, both


def test_a_battery_of_tasks_predicts_what_each_task_predicts_alone() -> None:
    """The public entry points, float32: SICK-R and STS-B together (as the battery runs
    them) against each alone, both encodings of STS-B; and the loop engine beside them,
    within float32 rounding."""
    sick, stsb, tables, both = two_tasks()
    protocol = RelatednessProtocol(max_epoch=100)
    loop = RelatednessProtocol(max_epoch=100, fit=fit_loop)
    for encoding in ("senteval", "rescaled"):
        together = predict_relatedness_tasks(
            both, [sick, stsb], protocol=protocol, seed=4, encodings={"STS-B": encoding}
        )
        for task in (sick, stsb):
            enc = encoding if task.name == "STS-B" else "senteval"
            embed = tables[task.name]
            alone = predict_relatedness(embed, task, protocol=protocol, seed=4, encoding=enc)
            np.testing.assert_allclose(together[task.name], alone, rtol=0, atol=1e-6)
            reference = predict_relatedness(embed, task, protocol=loop, seed=4, encoding=enc)
            np.testing.assert_allclose(together[task.name], reference, rtol=0, atol=1e-3)
    metrics = supervised_relatedness_tasks(both, [sick, stsb], protocol=protocol)
    assert set(metrics) == {
        f"{p}_{s}" for p in ("sickr", "stsb") for s in ("pearson", "spearman", "mse")
    }
    alone = supervised_relatedness(tables["SICK-R"], sick, protocol=protocol)
    assert metrics["sickr_pearson"] == pytest.approx(alone["sickr_pearson"], abs=1e-6)


@cuda
def test_cuda_graphs_match_the_eager_batched_steps_and_the_cpu() -> None:
    """On a GPU: the rounds as CUDA graphs give the eager batched engine's predictions
    (the same kernels, replayed), and both stay close to the CPU's."""
    sick, stsb, _, both = two_tasks(((700, 150, 200), (900, 150, 200)), (40, 41))
    runs = {}
    for label, device, graph in (
        ("graph", "cuda", True),
        ("eager", "cuda", False),
        ("cpu", "cpu", True),
    ):
        protocol = RelatednessProtocol(max_epoch=300, cuda_graph=graph)
        runs[label] = predict_relatedness_tasks(
            both, [sick, stsb], device=device, protocol=protocol
        )
    for name in ("SICK-R", "STS-B"):
        np.testing.assert_allclose(runs["graph"][name], runs["eager"][name], rtol=0, atol=1e-5)
        assert np.corrcoef(runs["graph"][name], runs["cpu"][name])[0, 1] > 0.999


@cuda
def test_cuda_graphs_captured_in_a_thread_while_another_stream_works() -> None:
    """The battery's worker captures its graphs on a side stream while training runs on
    another thread: the same predictions as a capture on a quiet device."""
    import threading

    sick, stsb, _, both = two_tasks(((700, 150, 200), (900, 150, 200)), (42, 43))
    protocol = RelatednessProtocol(max_epoch=200)
    quiet = predict_relatedness_tasks(both, [sick, stsb], device="cuda", protocol=protocol)
    stop = threading.Event()

    def busy() -> None:  # the training thread: kernels and allocations on its stream
        a = torch.randn(512, 512, device="cuda")
        while not stop.is_set():
            a = torch.tanh(a @ a) * 0.5
            torch.empty(1 << 20, device="cuda")
        torch.cuda.synchronize()

    worker = threading.Thread(target=busy)
    worker.start()
    results = {}

    def battery() -> None:
        with torch.cuda.stream(torch.cuda.Stream()):
            results["busy"] = predict_relatedness_tasks(
                both, [sick, stsb], device="cuda", protocol=protocol
            )

    try:
        thread = threading.Thread(target=battery)
        thread.start()
        thread.join()
    finally:
        stop.set()
        worker.join()
    for name in ("SICK-R", "STS-B"):
        np.testing.assert_allclose(results["busy"][name], quiet[name], rtol=0, atol=1e-6)
