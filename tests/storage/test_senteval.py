"""Tests for storage.senteval on tiny trees written in SentEval's exact layouts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from storage._errors import StoreError
from storage.senteval import (
    OFFICIAL_STS,
    OFFICIAL_SUPERVISED,
    Suite,
    load_senteval,
    load_sickr,
    load_sts_year,
    load_stsb,
    load_suite,
)

SHARED = "a man is playing a guitar ."  # occurs in every STS subtask: sentences() dedups it
SICK_HEADER = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"


def _write(path: Path, lines: list[str], *, newline: str = "\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes("".join(line + newline for line in lines).encode("utf-8"))


def write_sts_subtask(root: Path, year: str, subtask: str) -> None:
    """Four pairs; the third has an empty gold line, so three remain."""
    folder = root / "STS" / f"{year}-en-test"
    inputs = [f"{SHARED}\t{subtask} pair {i} ." for i in range(4)]
    _write(folder / f"STS.input.{subtask}.txt", inputs)
    _write(folder / f"STS.gs.{subtask}.txt", ["4.2", "0", "", "5.000"])


def write_stsb(root: Path) -> None:
    folder = root / "STS" / "STSBenchmark"
    for split in ("train", "dev", "test"):
        rows = [
            f"main-captions\tMSRvid\t2012test\t0001\t5.000\tA plane is taking off.\t{split} a",
            # a score below 1 (breaks SentEval's encoding, not the loader) and extra fields
            f"main-news\theadlines\t2013\t0002\t0.400\t{split} b\t{split} c\tsrc1\tsrc2",
            f'main-forums\tdeft-forum\t2014\t0003\t2.5\t"unbalanced quote\t{split} d',
        ]
        _write(folder / f"sts-{split}.csv", rows)


def write_sick(root: Path) -> None:
    files = {"SICK_train.txt": 3, "SICK_trial.txt": 2, "SICK_test_annotated.txt": 4}
    for file, n in files.items():
        rows = [
            f"{i}\tkids play {file} {i}\tchildren play {i}\t{1 + i * 0.5}\tNEUTRAL"
            for i in range(n)
        ]
        _write(root / "SICK" / file, [SICK_HEADER, *rows])


def write_official_tree(root: Path) -> Path:
    for year, subtasks in OFFICIAL_STS.items():
        for subtask in subtasks:
            write_sts_subtask(root, year, subtask)
    write_stsb(root)
    write_sick(root)
    return root


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return write_official_tree(tmp_path / "downstream")


def test_official_constants() -> None:
    assert sum(len(v) for v in OFFICIAL_STS.values()) == 24
    assert OFFICIAL_STS["STS13"] == ("FNWN", "headlines", "OnWN")
    assert OFFICIAL_SUPERVISED == ("STS-B", "SICK-R")


def test_full_official_load(tree: Path) -> None:
    bench = load_senteval(str(tree))
    assert bench.root == tree
    assert bench.suite == Suite("senteval", dict(OFFICIAL_STS), OFFICIAL_SUPERVISED)
    assert list(bench.sts) == list(OFFICIAL_STS)
    for year, subtasks in OFFICIAL_STS.items():
        assert tuple(bench.sts[year]) == subtasks
        for subtask, pairs in bench.sts[year].items():
            assert pairs.name == f"{year}/{subtask}"
            assert len(pairs) == 3  # the pair with the empty gold line is dropped
            assert pairs.sentences2 == tuple(f"{subtask} pair {i} ." for i in (0, 1, 3))
            assert pairs.gold.dtype == np.float64
            np.testing.assert_array_equal(pairs.gold, [4.2, 0.0, 5.0])
            assert not pairs.gold.flags.writeable

    stsb = bench.supervised["STS-B"]
    assert (stsb.name, stsb.score_range) == ("STS-B", (0.0, 5.0))
    assert [len(stsb.train), len(stsb.dev), len(stsb.test)] == [3, 3, 3]
    assert stsb.dev.name == "STS-B/dev"
    assert stsb.train.sentences1 == ("A plane is taking off.", "train b", '"unbalanced quote')
    assert stsb.train.sentences2 == ("train a", "train c", "train d")  # extra fields ignored
    np.testing.assert_array_equal(stsb.test.gold, [5.0, 0.4, 2.5])

    sick = bench.supervised["SICK-R"]
    assert (sick.name, sick.score_range) == ("SICK-R", (1.0, 5.0))
    assert [len(sick.train), len(sick.dev), len(sick.test)] == [3, 2, 4]  # header skipped
    assert sick.dev.sentences1[0] == "kids play SICK_trial.txt 0"
    np.testing.assert_array_equal(sick.test.gold, [1.0, 1.5, 2.0, 2.5])


def test_sentences_are_distinct_in_first_seen_order(tree: Path) -> None:
    bench = load_senteval(tree)
    sentences = bench.sentences()
    assert len(sentences) == len(set(sentences))
    assert sentences[:3] == [SHARED, "MSRpar pair 0 .", "MSRpar pair 1 ."]
    expected = {SHARED}
    for year in bench.sts.values():
        for pairs in year.values():
            expected.update(pairs.sentences2)
    for task in bench.supervised.values():
        for pairs in (task.train, task.dev, task.test):
            expected.update(pairs.sentences1 + pairs.sentences2)
    assert set(sentences) == expected
    assert sentences.count("A plane is taking off.") == 1


def test_load_suite_without_suite_json_is_official(tree: Path) -> None:
    suite = load_suite(tree)
    assert suite.name == "senteval"
    assert suite.sts == OFFICIAL_STS and suite.supervised == OFFICIAL_SUPERVISED


def test_suite_json_selects_what_is_loaded(tmp_path: Path) -> None:
    root = tmp_path / "world"
    for subtask in ("captions", "typos"):
        write_sts_subtask(root, "STS12", subtask)
    write_sts_subtask(root, "STS14", "paraphrases")
    write_sick(root)
    suite = {
        "name": "grounded-world",
        "sts": {"STS12": ["captions", "typos"], "STS14": ["paraphrases"]},
        "supervised": ["SICK-R"],
    }
    (root / "suite.json").write_text(json.dumps(suite), encoding="utf-8")

    bench = load_senteval(root)
    assert bench.suite == Suite(
        "grounded-world", {"STS12": ("captions", "typos"), "STS14": ("paraphrases",)}, ("SICK-R",)
    )
    assert {y: list(s) for y, s in bench.sts.items()} == {
        "STS12": ["captions", "typos"],
        "STS14": ["paraphrases"],
    }
    assert list(bench.supervised) == ["SICK-R"]
    assert bench.sts["STS14"]["paraphrases"].name == "STS14/paraphrases"


def test_line_endings_bom_and_trailing_empty_lines(tmp_path: Path) -> None:
    folder = tmp_path / "STS" / "STS15-en-test"
    _write(folder / "STS.input.belief.txt", ["a\tb", "c\td", ""], newline="\r\n")
    (folder / "STS.gs.belief.txt").write_bytes(b"\xef\xbb\xbf1.5\n\n")  # BOM; last pair unscored
    pairs = load_sts_year(tmp_path, "STS15", ["belief"])["belief"]
    assert (pairs.sentences1, pairs.sentences2) == (("a",), ("b",))
    np.testing.assert_array_equal(pairs.gold, [1.5])


# --- bad input: every error names the file and the line or field ---------------------


def _sts_files(root: Path, year: str = "STS12", subtask: str = "MSRpar") -> tuple[Path, Path]:
    folder = root / "STS" / f"{year}-en-test"
    return folder / f"STS.input.{subtask}.txt", folder / f"STS.gs.{subtask}.txt"


def test_missing_root(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"nowhere.*does not exist.*--senteval"):
        load_senteval(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="is not a directory"):
        load_suite(tmp_path / "file")


def test_missing_sts_file(tree: Path) -> None:
    gold = _sts_files(tree, "STS16", "plagiarism")[1]
    gold.unlink()
    pattern = re.escape(str(gold)) + r": missing file, needed by STS subtask STS16/plagiarism"
    with pytest.raises(StoreError, match=pattern + r".*--senteval.*data/downstream"):
        load_senteval(tree)


@pytest.mark.parametrize(
    "relative, task",
    [("STS/STSBenchmark/sts-dev.csv", "STS-B"), ("SICK/SICK_trial.txt", "SICK-R")],
)
def test_missing_supervised_file(tree: Path, relative: str, task: str) -> None:
    (tree / relative).unlink()
    with pytest.raises(
        StoreError, match=re.escape(f"{tree / relative}: missing file") + f".*{task}"
    ):
        load_senteval(tree)


@pytest.mark.parametrize("value", ["5.5", "-0.1", "abc", "nan"])
def test_bad_sts_gold(tree: Path, value: str) -> None:
    gold = _sts_files(tree)[1]
    _write(gold, ["4.2", value, "", "5.000"])
    pattern = re.escape(f"{gold}, line 2: expected a gold score in [0, 5], got {value!r}")
    with pytest.raises(StoreError, match=pattern):
        load_sts_year(tree, "STS12", ["MSRpar"])


def test_mismatched_line_counts(tree: Path) -> None:
    inputs, gold = _sts_files(tree)
    _write(gold, ["4.2", "0", ""])
    pattern = re.escape(f"{inputs} has 4 lines but {gold} has 3")
    with pytest.raises(StoreError, match=pattern):
        load_sts_year(tree, "STS12", ["MSRpar"])


@pytest.mark.parametrize("line", ["only one sentence", "one\ttwo\tthree"])
def test_sts_input_needs_two_fields(tree: Path, line: str) -> None:
    inputs = _sts_files(tree)[0]
    _write(inputs, ["a\tb", "c\td", line, "e\tf"])
    with pytest.raises(StoreError, match=re.escape(f"{inputs}, line 3: expected two tab-sep")):
        load_sts_year(tree, "STS12", ["MSRpar"])


def test_all_unscored_is_an_error(tree: Path) -> None:
    gold = _sts_files(tree)[1]
    _write(gold, ["", "", "", ""])
    with pytest.raises(StoreError, match=re.escape(f"{gold}: expected at least one scored pair")):
        load_sts_year(tree, "STS12", ["MSRpar"])


def test_stsb_too_few_fields(tree: Path) -> None:
    path = tree / "STS" / "STSBenchmark" / "sts-test.csv"
    _write(path, ["g\tf\ty\t1\t3.0\ts1\ts2", "g\tf\ty\t2\t3.0\tonly one sentence"])
    pattern = re.escape(f"{path}, line 2: expected at least 7 tab-separated fields, got 6")
    with pytest.raises(StoreError, match=pattern):
        load_stsb(tree)


def test_stsb_bad_score(tree: Path) -> None:
    path = tree / "STS" / "STSBenchmark" / "sts-train.csv"
    _write(path, ["g\tf\ty\t1\t3.0\ts1\ts2", "g\tf\ty\t2\t5.1\ts3\ts4"])
    with pytest.raises(StoreError, match=re.escape(f"{path}, line 2: expected a gold score")):
        load_stsb(tree)


def test_sick_score_below_one(tree: Path) -> None:
    path = tree / "SICK" / "SICK_test_annotated.txt"
    _write(path, [SICK_HEADER, "1\ta\tb\t3.0\tNEUTRAL", "2\tc\td\t0.5\tNEUTRAL"])
    pattern = re.escape(f"{path}, line 3: expected a gold score in [1, 5], got '0.5'")
    with pytest.raises(StoreError, match=pattern):
        load_sickr(tree)


def test_sick_without_header(tree: Path) -> None:
    path = tree / "SICK" / "SICK_train.txt"
    _write(path, ["1\ta\tb\t3.0\tNEUTRAL", "2\tc\td\t4.0\tNEUTRAL"])
    with pytest.raises(StoreError, match=re.escape(f"{path}, line 1: expected a header line")):
        load_sickr(tree)


def test_not_utf8(tree: Path) -> None:
    inputs = _sts_files(tree)[0]
    inputs.write_bytes(b"a\tb\nc\td\ncaf\xe9\tx\ne\tf\n")
    with pytest.raises(StoreError, match=re.escape(f"{inputs}, line 3: expected UTF-8")):
        load_sts_year(tree, "STS12", ["MSRpar"])


@pytest.mark.parametrize(
    "content, where",
    [
        ("{not json", "expected a JSON object"),
        ('["STS12"]', "expected an object with exactly the fields"),
        ('{"name": "w", "sts": {}}', r"exactly the fields \['name', 'sts', 'supervised'\]"),
        ('{"name": "w", "sts": {}, "supervised": [], "extra": 1}', "got \\['extra', 'name'"),
        ('{"name": "", "sts": {"STS12": ["a"]}, "supervised": []}', "field 'name'"),
        ('{"name": "w", "sts": ["STS12"], "supervised": []}', "field 'sts': expected an object"),
        ('{"name": "w", "sts": {"STS12": "a"}, "supervised": []}', "field 'sts.STS12'"),
        ('{"name": "w", "sts": {"STS12": []}, "supervised": []}', "field 'sts.STS12'"),
        ('{"name": "w", "sts": {"STS12": ["a", "a"]}, "supervised": []}', "field 'sts.STS12'"),
        ('{"name": "w", "sts": {"STS12": ["../a"]}, "supervised": []}', "field 'sts.STS12'"),
        ('{"name": "w", "sts": {"../x": ["a"]}, "supervised": []}', "field 'sts'"),
        ('{"name": "w", "sts": {}, "supervised": ["SICK-E"]}', "field 'supervised'.*SICK-R"),
        ('{"name": "w", "sts": {}, "supervised": "STS-B"}', "field 'supervised'"),
        ('{"name": "w", "sts": {}, "supervised": [{}]}', "field 'supervised'"),
        ('{"name": "w", "sts": {}, "supervised": []}', "expected at least one task"),
    ],
)
def test_bad_suite_json(tree: Path, content: str, where: str) -> None:
    path = tree / "suite.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(StoreError, match=re.escape(str(path)) + ".*" + where):
        load_senteval(tree)


def test_suite_json_subtask_without_files(tree: Path) -> None:
    suite = {"name": "w", "sts": {"STS12": ["captions"]}, "supervised": []}
    (tree / "suite.json").write_text(json.dumps(suite), encoding="utf-8")
    expected = re.escape(str(_sts_files(tree, "STS12", "captions")[0])) + ": missing file"
    with pytest.raises(StoreError, match=expected + ".*STS12/captions"):
        load_senteval(tree)
