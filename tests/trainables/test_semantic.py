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
from trainables.config import TrainConfig
from trainables.relatedness import RelatednessProtocol
from trainables.semantic import (
    DevSemanticEvaluator,
    EmbeddingTable,
    SemanticEvaluator,
    cosine_similarity,
    dev_semantic_score,
    make_semantic,
    semantic_score,
    sts_metrics,
)

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


def test_semantic_score() -> None:
    assert semantic_score({"sts12_16_pearson": 0.5, "sickr_pearson": 0.8}) == pytest.approx(0.65)
    assert semantic_score({"sts12_16_pearson": 0.5, "stsb_pearson": 0.1}) == 0.5
    assert semantic_score({"sickr_pearson": 0.8}) == 0.8
    assert semantic_score({"stsb_pearson": 0.7}) == 0.7
    assert math.isnan(semantic_score({}))


def test_evaluator_on_the_official_tree(semantic_data: SemanticBenchmark) -> None:
    evaluator = SemanticEvaluator(semantic_data, protocol=RelatednessProtocol(max_epoch=50))
    embed = RandomEmbed(3)
    got = evaluator(embed)
    assert len(embed.calls) == 1 and set(embed.calls[0]) == set(semantic_data.sentences())
    sts_keys = set(sts_metrics(embed, semantic_data))
    assert set(got) == sts_keys | {n for n in names.SEMANTIC if not n.startswith("sts1")}
    assert got["semantic"] == pytest.approx((got["sts12_16_pearson"] + got["sickr_pearson"]) / 2)
    assert all(isinstance(v, float) for v in got.values())
    for task, prefix in (("STS-B", "stsb"), ("SICK-R", "sickr")):  # cosine on the test pairs
        pairs = semantic_data.supervised[task].test
        sims = [
            _cosine(embed, a, b) for a, b in zip(pairs.sentences1, pairs.sentences2, strict=True)
        ]
        expected = scipy.stats.pearsonr(sims, pairs.gold)[0]
        assert got[f"{prefix}_cosine_pearson"] == pytest.approx(expected, abs=1e-12)


def _cosine(embed: RandomEmbed, a: str, b: str) -> float:
    u, v = embed.vectors[a], embed.vectors[b]
    return float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))


def test_dev_score_reads_dev_pairs_only(semantic_data: SemanticBenchmark) -> None:
    """dev/semantic: cosine Pearson and Spearman on STS-B dev and SICK-R trial, and their
    Pearsons' mean; only those pairs' sentences are embedded."""
    evaluator = DevSemanticEvaluator(semantic_data)
    embed = RandomEmbed(5)
    got = evaluator(embed)
    assert set(got) == set(names.DEV_SEMANTIC)
    dev = {
        "stsb": semantic_data.supervised["STS-B"].dev,
        "sickr": semantic_data.supervised["SICK-R"].dev,
    }
    embedded = {s for call in embed.calls for s in call}
    assert embedded == {s for p in dev.values() for s in (*p.sentences1, *p.sentences2)}
    for prefix, pairs in dev.items():
        sims = [
            _cosine(embed, a, b) for a, b in zip(pairs.sentences1, pairs.sentences2, strict=True)
        ]
        assert got[f"{prefix}_cosine_pearson"] == pytest.approx(
            scipy.stats.pearsonr(sims, pairs.gold)[0], abs=1e-12
        )
        assert got[f"{prefix}_cosine_spearman"] == pytest.approx(
            scipy.stats.spearmanr(sims, pairs.gold)[0], abs=1e-12
        )
    assert got["semantic"] == pytest.approx(
        (got["stsb_cosine_pearson"] + got["sickr_cosine_pearson"]) / 2
    )


def test_dev_score_ignores_every_test_gold_score(semantic_data: SemanticBenchmark) -> None:
    """Shuffle (and negate) every test gold score: the dev score cannot move, the battery
    does."""
    shuffled = shuffled_test_golds(semantic_data, seed=0)
    assert DevSemanticEvaluator(shuffled)(RandomEmbed(6)) == DevSemanticEvaluator(semantic_data)(
        RandomEmbed(6)
    )
    battery = SemanticEvaluator(semantic_data, supervised=())(RandomEmbed(6))
    assert SemanticEvaluator(shuffled, supervised=())(RandomEmbed(6)) != battery


def shuffled_test_golds(bench: SemanticBenchmark, seed: int) -> SemanticBenchmark:
    """``bench`` with every test set's gold scores permuted and reflected (train and dev
    sets untouched)."""
    rng = np.random.default_rng(seed)

    def shuffle(pairs: SentencePairs) -> SentencePairs:
        low, high = (1.0, 5.0) if pairs.name.startswith("SICK") else (0.0, 5.0)
        gold = low + high - rng.permutation(pairs.gold)
        return SentencePairs(pairs.name, pairs.sentences1, pairs.sentences2, gold)

    sts = {y: {s: shuffle(p) for s, p in subs.items()} for y, subs in bench.sts.items()}
    supervised = {
        name: SupervisedTask(name, t.train, t.dev, shuffle(t.test), t.score_range)
        for name, t in bench.supervised.items()
    }
    return SemanticBenchmark(bench.root, bench.suite, sts, supervised)


def test_dev_semantic_score() -> None:
    assert dev_semantic_score(
        {"stsb_cosine_pearson": 0.5, "sickr_cosine_pearson": 0.8, "sickr_pearson": 0.0}
    ) == pytest.approx(0.65)
    assert dev_semantic_score({"sickr_cosine_pearson": 0.8}) == 0.8
    assert math.isnan(dev_semantic_score({"sts12_16_pearson": 0.9}))


def test_make_semantic(semantic_data: SemanticBenchmark) -> None:
    config = TrainConfig(device="cpu", seed=3, stsb_encoding="rescaled")
    evaluation = make_semantic(semantic_data, config.evaluation, config.run)
    assert evaluation is not None
    assert evaluation.test.stsb_encoding == "rescaled" and evaluation.test.seed == 3
    off = config.replace(semantic_every=0)
    assert make_semantic(semantic_data, off.evaluation, off.run) is None
    assert make_semantic(None, config.evaluation, config.run) is None
    with pytest.raises(ValueError, match="stsb_encoding: got 'raw'"):
        SemanticEvaluator(semantic_data, stsb_encoding="raw")


def test_cosine_similarity_of_zero_vectors_is_zero() -> None:
    a = torch.tensor([[0.0, 0.0], [1.0, 0.0]])
    b = torch.tensor([[1.0, 1.0], [2.0, 0.0]])
    np.testing.assert_allclose(cosine_similarity(a, b), [0.0, 1.0])


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
