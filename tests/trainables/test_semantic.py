"""trainables.semantic on tiny SentEval trees (written by tests/storage's writers) and on
synthetic supervised tasks, against scipy and hand-computed values."""

from __future__ import annotations

import doctest
import logging
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
import torch

from storage.senteval import (
    OFFICIAL_STS,
    SemanticBenchmark,
    SentencePairs,
    SupervisedTask,
    load_senteval,
)
from tests.storage.test_senteval import _write, write_official_tree
from trainables import names, semantic
from trainables.semantic import (
    EmbeddingTable,
    RelatednessProtocol,
    SemanticEvaluator,
    _Adam,
    _gradient,
    from_class_scale,
    relatedness_targets,
    semantic_score,
    sts_metrics,
    supervised_relatedness,
    to_class_scale,
)

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
SIZES = {("STS12", "MSRpar"): 9, ("STS12", "MSRvid"): 5, ("STS13", "FNWN"): 12}


class RandomEmbed:
    """A fixed random vector per sentence; counts its calls."""

    def __init__(self, seed: int = 0, dim: int = 6) -> None:
        self.rng, self.dim, self.vectors = np.random.default_rng(seed), dim, {}
        self.calls: list[list[str]] = []

    def __call__(self, sentences: Sequence[str]) -> np.ndarray:
        self.calls.append(list(sentences))
        for s in sentences:
            self.vectors.setdefault(s, self.rng.normal(size=self.dim))
        return np.stack([self.vectors[s] for s in sentences])


@pytest.fixture(scope="module")
def semantic_data(tmp_path_factory: pytest.TempPathFactory) -> SemanticBenchmark:
    """The official tree (3 scored pairs per subtask) with three subtasks resized, so
    that the pair-weighted and plain means differ."""
    root = write_official_tree(tmp_path_factory.mktemp("senteval") / "downstream")
    rng = np.random.default_rng(42)
    for (year, subtask), n in SIZES.items():
        folder = root / "STS" / f"{year}-en-test"
        _write(
            folder / f"STS.input.{subtask}.txt",
            [f"{subtask} left {i} .\t{subtask} right {i} ." for i in range(n)],
        )
        _write(folder / f"STS.gs.{subtask}.txt", [f"{g:.2f}" for g in rng.uniform(0, 5, n)])
    return load_senteval(root)


def reference_sts(embed: RandomEmbed, benchmark: SemanticBenchmark) -> dict[str, float]:
    out: dict[str, float] = {}
    year_means = []
    for year, subtasks in benchmark.sts.items():
        rs, ns = [], []
        for subtask, pairs in subtasks.items():
            sims = []
            for a, b in zip(pairs.sentences1, pairs.sentences2, strict=True):
                u, v = embed.vectors[a], embed.vectors[b]
                sims.append(float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v))))
            r = scipy.stats.pearsonr(sims, pairs.gold)[0]
            out[names.subtask_key(year, subtask, "pearson")] = r
            out[names.subtask_key(year, subtask, "spearman")] = scipy.stats.spearmanr(
                sims, pairs.gold
            )[0]
            rs.append(r)
            ns.append(len(pairs))
        out[f"{year.lower()}_pearson"] = sum(r * n for r, n in zip(rs, ns, strict=True)) / sum(ns)
        out[f"{year.lower()}_pearson_mean"] = sum(rs) / len(rs)
        year_means.append(out[f"{year.lower()}_pearson"])
    out["sts12_16_pearson"] = sum(year_means) / len(year_means)
    return out


def test_sts_metrics_match_scipy(semantic_data: SemanticBenchmark) -> None:
    embed = RandomEmbed()
    got = sts_metrics(embed, semantic_data)
    assert len(embed.calls) == 1  # every distinct sentence embedded once, in one call
    assert len(embed.calls[0]) == len(set(embed.calls[0]))
    expected = reference_sts(embed, semantic_data)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-12), key
    # the resized subtasks make the weighted and plain means differ
    assert got["sts12_pearson"] != pytest.approx(got["sts12_pearson_mean"])


def test_sts_metric_names(semantic_data: SemanticBenchmark) -> None:
    got = sts_metrics(RandomEmbed(), semantic_data)
    subtasks = {
        names.subtask_key(y, s, stat)
        for y, subs in OFFICIAL_STS.items()
        for s in subs
        for stat in ("pearson", "spearman")
    }
    yearly = {n for n in names.SEMANTIC if n.startswith("sts1") and "pearson" in n}
    assert set(got) == subtasks | yearly
    assert "sts12_surprise_onwn_pearson" in got


def test_sts_weighted_mean_by_hand(semantic_data: SemanticBenchmark) -> None:
    got = sts_metrics(RandomEmbed(1), semantic_data)
    r = {s: got[names.subtask_key("STS13", s, "pearson")] for s in OFFICIAL_STS["STS13"]}
    assert got["sts13_pearson"] == pytest.approx(
        (12 * r["FNWN"] + 3 * r["headlines"] + 3 * r["OnWN"]) / 18
    )
    assert got["sts13_pearson_mean"] == pytest.approx(sum(r.values()) / 3)
    years = [got[f"{y}_pearson"] for y in names.STS_YEARS]
    assert got["sts12_16_pearson"] == pytest.approx(sum(years) / 5)


def test_torch_and_numpy_embeddings_agree(semantic_data: SemanticBenchmark) -> None:
    embed = RandomEmbed(2)
    expected = sts_metrics(embed, semantic_data)
    got = sts_metrics(lambda s: torch.from_numpy(embed(s)).float(), semantic_data)
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-5), key


def test_constant_embeddings_do_not_crash(
    semantic_data: SemanticBenchmark, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="trainables.semantic"):
        got = sts_metrics(lambda s: np.ones((len(s), 4)), semantic_data)
    assert set(got.values()) == {0.0}
    assert "STS12/MSRpar: constant predictions" in caplog.text


def test_zero_embeddings_have_similarity_zero(semantic_data: SemanticBenchmark) -> None:
    got = sts_metrics(lambda s: torch.zeros(len(s), 4), semantic_data)
    assert got["sts12_16_pearson"] == 0.0


def test_embed_must_return_one_row_per_sentence(semantic_data: SemanticBenchmark) -> None:
    message = r"one row per sentence, shape \(\d+, dim\), got shape \(3, 2\)"
    with pytest.raises(ValueError, match=message):
        sts_metrics(lambda s: np.zeros((3, 2)), semantic_data)
    with pytest.raises(TypeError, match="got list"):
        sts_metrics(lambda s: [[0.0]] * len(s), semantic_data)


def test_embedding_table_reuses_itself() -> None:
    table = EmbeddingTable.build(RandomEmbed(), ["a", "b", "a"])
    assert list(table.index) == ["a", "b"]
    assert EmbeddingTable.build(table, ["b"]) is table
    with pytest.raises(KeyError, match="'c' is not in the embedding table"):
        table(["c"])


@pytest.mark.parametrize(
    ("score", "score_range", "expected"),
    [
        (3.4, (1.0, 5.0), [0, 0, 0.6, 0.4, 0]),
        (1.0, (1.0, 5.0), [1, 0, 0, 0, 0]),
        (2.0, (1.0, 5.0), [0, 1, 0, 0, 0]),
        (4.75, (1.0, 5.0), [0, 0, 0, 0.25, 0.75]),
        (5.0, (1.0, 5.0), [0, 0, 0, 0, 1]),
        (0.0, (0.0, 5.0), [1, 0, 0, 0, 0]),  # STS-B: [0, 5] -> [1, 5], 0 -> 1
        (0.4, (0.0, 5.0), [0.68, 0.32, 0, 0, 0]),  # -> 1.32
        (2.5, (0.0, 5.0), [0, 0, 1, 0, 0]),  # -> 3
        (5.0, (0.0, 5.0), [0, 0, 0, 0, 1]),
    ],
)
def test_relatedness_targets_by_hand(score, score_range, expected) -> None:
    target = relatedness_targets(np.array([score]), score_range)
    np.testing.assert_allclose(target, [expected], atol=1e-12)
    assert target.sum() == pytest.approx(1.0)
    class_score = to_class_scale(np.array([score]), score_range)
    assert target @ np.arange(1, 6) == pytest.approx(class_score)
    assert from_class_scale(class_score, score_range) == pytest.approx([score])


def test_scores_outside_the_range_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"scores must lie in \(1.0, 5.0\), got \[0.5, 3.0\]"):
        relatedness_targets(np.array([0.5, 3.0]), (1.0, 5.0))


def test_training_step_matches_autograd_and_torch_adam() -> None:
    """The hand-written step against SentEval's model: Linear + Softmax, summed MSE, Adam."""
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.normal(size=(64, 9))).float()
    x[:, -1] = 1.0  # the bias column
    target = torch.from_numpy(relatedness_targets(rng.uniform(1, 5, 64), (1.0, 5.0))).float()
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
    return task, lambda sentences: np.stack([vectors[s] for s in sentences])


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


def test_stsb_scores_below_one_and_mse_on_the_gold_scale() -> None:
    task, embed = synthetic_task(2, learnable=True, name="STS-B")
    assert task.train.gold.min() == 0.0  # the scores SentEval's encoding cannot hold
    got = supervised_relatedness(embed, task)
    assert set(got) == {"stsb_pearson", "stsb_spearman", "stsb_mse"}
    assert got["stsb_pearson"] > 0.8
    assert got["stsb_mse"] < 0.5 * np.var(task.test.gold)  # predictions mapped back to [0, 5]


def test_deterministic_for_a_seed() -> None:
    task, embed = synthetic_task(3, learnable=True, sizes=(200, 60, 100))
    protocol = RelatednessProtocol(max_epochs=150)
    first = supervised_relatedness(embed, task, seed=7, protocol=protocol)
    assert supervised_relatedness(embed, task, seed=7, protocol=protocol) == first
    assert supervised_relatedness(embed, task, seed=8, protocol=protocol) != first


def test_rounds_and_early_stopping(caplog: pytest.LogCaptureFixture) -> None:
    task, embed = synthetic_task(4, learnable=False, sizes=(100, 40, 50))
    with caplog.at_level(logging.DEBUG, logger="trainables.semantic"):
        supervised_relatedness(embed, task, protocol=RelatednessProtocol(max_epochs=120))
    assert "SICK-R: 120 epochs" in caplog.text  # 50 + 50 + 20: the cap cuts the last round
    caplog.clear()
    constant = lambda sentences: np.ones((len(sentences), 3))  # noqa: E731
    with caplog.at_level(logging.DEBUG, logger="trainables.semantic"):
        got = supervised_relatedness(constant, task)
    assert "SICK-R: 200 epochs" in caplog.text  # the dev Pearson is NaN: 4 rounds, no gain
    assert got["sickr_pearson"] == got["sickr_spearman"] == 0.0
    assert "SICK-R/test: constant predictions" in caplog.text
    assert math.isfinite(got["sickr_mse"])


@cuda
def test_cuda_runs_and_matches_cpu() -> None:
    task, embed = synthetic_task(5, learnable=True, sizes=(300, 80, 200))
    cpu = supervised_relatedness(embed, task)
    gpu = supervised_relatedness(embed, task, device="cuda")
    assert gpu["sickr_pearson"] == pytest.approx(cpu["sickr_pearson"], abs=0.02)


def test_semantic_score() -> None:
    assert semantic_score({"sts12_16_pearson": 0.5, "sickr_pearson": 0.8}) == pytest.approx(0.65)
    assert semantic_score({"sts12_16_pearson": 0.5, "stsb_pearson": 0.1}) == 0.5
    assert semantic_score({"sickr_pearson": 0.8}) == 0.8
    assert semantic_score({"stsb_pearson": 0.7}) == 0.7
    assert math.isnan(semantic_score({}))


def test_evaluator_on_the_official_tree(semantic_data: SemanticBenchmark) -> None:
    evaluator = SemanticEvaluator(semantic_data, protocol=RelatednessProtocol(max_epochs=100))
    assert (evaluator.primary_metric, evaluator.greater_is_better) == ("semantic", True)
    embed = RandomEmbed(3)
    got = evaluator(embed)
    assert len(embed.calls) == 1 and set(embed.calls[0]) == set(semantic_data.sentences())
    sts_keys = set(sts_metrics(embed, semantic_data))
    assert set(got) == sts_keys | {n for n in names.SEMANTIC if not n.startswith("sts1")}
    assert got["semantic"] == pytest.approx((got["sts12_16_pearson"] + got["sickr_pearson"]) / 2)
    assert all(isinstance(v, float) for v in got.values())


def test_evaluator_supervised_selection(semantic_data: SemanticBenchmark, tmp_path: Path) -> None:
    only_sts = SemanticEvaluator(semantic_data, supervised=())
    got = only_sts(RandomEmbed(4))
    assert got["semantic"] == got["sts12_16_pearson"]
    assert not any(key.startswith(("sickr", "stsb")) for key in got)
    message = r"unknown task\(s\) \['SICK-E'\]; valid: \['STS-B', 'SICK-R'\]"
    with pytest.raises(ValueError, match=message):
        SemanticEvaluator(semantic_data, supervised=("SICK-E",))


def test_docstring_examples_run() -> None:
    result = doctest.testmod(semantic)
    assert result.attempted > 0 and result.failed == 0
