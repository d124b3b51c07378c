"""The char n-gram baselines of a store, computed once and cached beside it."""

from __future__ import annotations

import json
import math
import shutil
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

import trainables.baselines
from storage.senteval import load_senteval
from trainables import names
from trainables.baselines import (
    BASELINES_FILE,
    NgramRidge,
    baselines,
    char_ngram_features,
    main,
    store_baselines,
)
from trainables.data import TrainingData, default_senteval
from trainables.semantic import DevSemanticEvaluator

DEV_R10, TEST_R10 = names.key(names.DEV, "r10_mean"), names.key(names.TEST, "r10_mean")
DEV_SEM, TEST_SEM = names.PRIMARY_SEMANTIC, names.key(names.TEST, "semantic")


@pytest.fixture(scope="module")
def store(tiny_world: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tiny world (the cache is written into the store's folder)."""
    copy = tmp_path_factory.mktemp("baselines") / "store"
    shutil.copytree(tiny_world, copy)
    return copy


@pytest.fixture(scope="module")
def computed(store: Path) -> dict[str, dict[str, float]]:
    table, cache = store_baselines(str(store), default_senteval(str(store)))
    assert cache == "written"
    return table


@pytest.mark.slow
def test_every_baseline_has_dev_and_test_values_under_the_trials_names(
    store: Path, computed: dict[str, dict[str, float]]
) -> None:
    data = TrainingData.from_store(str(store))
    for split, items in ((names.DEV, data.val), (names.TEST, data.test)):
        chance = computed["chance"][names.key(split, "c2i_r10")]
        assert chance == pytest.approx(100 * min(10, items.num_images) / items.num_images)
    assert {DEV_R10, TEST_R10, DEV_SEM, TEST_SEM} <= set(computed["ngram_ridge"])
    assert {DEV_SEM, TEST_SEM} <= set(computed["char_ngrams"])
    assert DEV_R10 not in computed["char_ngrams"]  # a cosine of n-grams retrieves no image
    assert computed["ngram_ridge"][TEST_R10] > computed["chance"][TEST_R10]


@pytest.mark.slow  # 5 s or more in the fast tier (BENCHMARKS.md)
def test_the_cache_is_read_back_while_the_store_and_sets_are_unchanged(
    store: Path, computed: dict[str, dict[str, float]]
) -> None:
    text = (store / BASELINES_FILE).read_text(encoding="utf-8")
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))
    again, cache = store_baselines(str(store), default_senteval(str(store)))
    assert cache == "read"  # not computed again
    assert again.keys() == computed.keys()
    for name, metrics in computed.items():
        for key, value in metrics.items():
            assert again[name][key] == value or (math.isnan(value) and math.isnan(again[name][key]))


def test_garbage_in_the_cache_is_recomputed_not_trusted(
    store: Path, computed: dict[str, dict[str, float]], tmp_path: Path, monkeypatch
) -> None:
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    recomputed = {"chance": {TEST_R10: 1.0}}  # a stand-in, to tell a recomputation apart
    monkeypatch.setattr(trainables.baselines, "baselines", lambda data, senteval: recomputed)
    valid = json.loads((store / BASELINES_FILE).read_text(encoding="utf-8"))
    stale = {**valid, "key": {**valid["key"], "version": 0}}  # an older code's cache
    for garbage in ("{", "[]", '{"key": 1}', json.dumps(stale), "\x00\xff"):
        (copy / BASELINES_FILE).write_text(garbage, encoding="utf-8", errors="surrogateescape")
        table, cache = store_baselines(str(copy), default_senteval(str(copy)))
        assert cache == "written" and table == recomputed, garbage
        assert json.loads((copy / BASELINES_FILE).read_text())["baselines"] == recomputed


@pytest.mark.slow
def test_changed_semantic_sets_invalidate_the_cache(
    store: Path, computed: dict[str, dict[str, float]], tmp_path: Path
) -> None:
    copy = tmp_path / "store"  # the cache holds one entry: leave the module's alone
    shutil.copytree(store, copy)
    senteval = tmp_path / "senteval"
    shutil.copytree(default_senteval(str(store)), senteval)
    gold = next(senteval.glob("SICK/SICK_test_annotated.txt"))
    lines = gold.read_text(encoding="utf-8").splitlines()
    head, first, *rest = lines
    fields = first.split("\t")
    fields[3] = "1.0" if fields[3] != "1.0" else "5.0"  # one relatedness score changed
    gold.write_text("\n".join([head, "\t".join(fields), *rest]) + "\n", encoding="utf-8")
    _, cache = store_baselines(str(copy), default_senteval(str(copy)))
    assert cache == "read"  # the copy's cache is valid for its own sets
    table, cache = store_baselines(str(copy), str(senteval))
    assert cache == "written"
    assert table["chance"] == computed["chance"]
    _, cache = store_baselines(str(copy), str(senteval))
    assert cache == "read"


def test_the_cli_prints_dev_and_test_columns_from_the_cache(
    store: Path, computed: dict[str, dict[str, float]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--data", str(store)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["baseline", DEV_R10, DEV_SEM]
    assert out[-1].endswith("read from the store's cache)")
    assert main(["--data", str(store / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "missing" in err[0]


def test_a_cache_that_cannot_be_written_is_said_and_the_baselines_still_returned(
    store: Path, computed: dict[str, dict[str, float]], tmp_path: Path, monkeypatch
) -> None:
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    (copy / BASELINES_FILE).unlink()
    (copy / BASELINES_FILE).mkdir()  # a folder where the cache goes: never written over
    monkeypatch.setattr(trainables.baselines, "baselines", lambda data, senteval: computed)
    table, cache = store_baselines(str(copy), default_senteval(str(copy)))
    assert table == computed
    assert cache.startswith(f"not written: {copy / BASELINES_FILE}: cannot write it")
    assert (copy / BASELINES_FILE).is_dir() and not list((copy).glob(".*.tmp"))


def test_baselines_take_the_same_data_in_memory(store: Path) -> None:
    """What the driver passes (the store it read already) gives the same numbers."""
    data = TrainingData.from_store(str(store))
    table = baselines(data, None)  # no semantic sets: retrieval only
    assert set(table) == {"chance", "ngram_ridge"}
    assert DEV_SEM not in table["ngram_ridge"]


def _counted_one_by_one(texts: list[str], dim: int) -> np.ndarray:
    """The n-gram features as their definition reads: each gram's CRC-32 bucket added
    to its sentence's row, one at a time."""
    counts = np.zeros((len(texts), dim))
    for row, text in enumerate(texts):
        for n in range(1, 5):
            for i in range(len(text) - n + 1):
                counts[row, zlib.crc32(text[i : i + n].encode()) % dim] += 1.0
    x = np.log1p(counts)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def test_ngram_features_are_their_definition_across_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Counted in blocks of rows, each distinct gram hashed once: the same matrix, bit
    for bit, as counting each gram of each sentence on its own (repeated grams, a
    sentence shorter than a gram, an empty one, non-ASCII text, a block boundary)."""
    monkeypatch.setattr(trainables.baselines, "_COUNT_BLOCK", 3)
    texts = ["a red circle", "", "ab", "aaaa aaaa", "Über café – naïve", "a red circle", "x"]
    for dim in (4096, 7):
        ours = trainables.baselines.char_ngram_features(texts, dim)
        assert np.array_equal(ours, _counted_one_by_one(texts, dim))
    assert not ours[1].any() and ours.shape == (7, 7)


@pytest.mark.slow
def test_both_semantic_baselines_score_as_their_embeddings_alone(
    store: Path, computed: dict[str, dict[str, float]]
) -> None:
    """One n-gram matrix feeds both baselines' semantic scores: each equals its own
    embedding function evaluated on its own."""
    data = TrainingData.from_store(str(store))
    bench = load_senteval(default_senteval(str(store)))
    ridge = NgramRidge(data.train)

    def ngrams(sentences: Sequence[str]) -> torch.Tensor:
        return torch.from_numpy(char_ngram_features(sentences)).float()

    alone = {
        "char_ngrams": DevSemanticEvaluator(bench)(ngrams),
        "ngram_ridge": DevSemanticEvaluator(bench)(ridge.embed),
    }
    for name, metrics in alone.items():
        assert metrics["semantic"] == computed[name][DEV_SEM]
