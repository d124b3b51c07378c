"""The paper tables: their rows, intervals and reference numbers; and the hard-coded
reference numbers against the paper's own intervals."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis import _tables, reference
from analysis._html import Section
from tests.analysis.helpers import html_tables, make_record
from trainables import names
from trainables.metrics import pearson_ci, recall_ci

TEST_METRICS = {
    "c2i_r1": 30.0, "c2i_r5": 60.0, "c2i_r10": 72.0, "c2i_medr": 3.0,
    "i2c_r1": 40.0, "i2c_r5": 70.0, "i2c_r10": 80.0, "i2c_medr": 2.0,
    "r10_mean": 76.0, "sts12_msrpar_pearson": 0.5, "sts12_pearson": 0.5,
    "sts12_16_pearson": 0.5, "sickr_pearson": 0.8, "stsb_pearson": 0.7,
}  # fmt: skip
MSRPAR = names.subtask_key("STS12", "MSRpar", "pearson")


def _record(dataset: str | None, **kwargs: object):
    trial = {"trial_id": "t1", **{names.key(names.ENSEMBLE, k): v for k, v in TEST_METRICS.items()}}
    return make_record(
        [trial, {"trial_id": "t2"}],
        dataset=dataset,
        split_images={"test": 1000},
        pair_counts=dict(reference.OFFICIAL_PAIRS),
        semantic_labels=dict(reference.OFFICIAL_LABELS),
        **kwargs,  # type: ignore[arg-type]
    )


def test_retrieval_table_rows_and_the_papers_row_for_flickr8k() -> None:
    result = _tables.retrieval_table(_record("flickr8k"), [("t1", "best dev R@10 mean")])
    ours, paper = result.table.to_dict("records")
    assert ours["model"] == "t1" and ours["source"] == "ours: best dev R@10 mean"
    assert ours["c2i_r1"] == 30.0 and ours["i2c_medr"] == 2.0
    assert (ours["c2i_r1_ci_low"], ours["c2i_r1_ci_high"]) == pytest.approx(recall_ci(30.0, 1000))
    assert paper["model"] == "char-GRU (paper)"
    assert paper["c2i_r1"] == 27.5 and paper["c2i_medr"] == 4.0 and paper["i2c_r10"] == 79.3
    assert (paper["c2i_r1_ci_low"], paper["c2i_r1_ci_high"]) == pytest.approx((24.7, 30.3))
    assert "Table 2" in result.note
    shown = _tables.format_retrieval(result.table)
    assert shown[("Caption to Image", "R@1")].tolist() == ["30.0 [27.2, 32.8]", "27.5 [24.7, 30.3]"]
    assert shown[("Image to Caption", "med r")].tolist() == ["2.0", "2.0"]


def test_retrieval_table_for_coco_compares_with_the_5k_row() -> None:
    result = _tables.retrieval_table(_record("coco"), [("t1", "x")])
    assert result.table["c2i_r10"].tolist() == [72.0, 60.9]
    assert "5k" in result.note


@pytest.mark.parametrize("dataset", ["synthetic", "flickr30k"])
def test_no_paper_reference_for_other_data_sets(dataset: str) -> None:
    record = _record(dataset)
    retrieval = _tables.retrieval_table(record, [("t1", "x")])
    semantic = _tables.semantic_table(record, [("t1", "x")])
    assert len(retrieval.table) == 1 and set(semantic.table["model"]) == {"t1"}
    assert retrieval.note == semantic.note == f"no paper reference for this data set ({dataset})"


def test_semantic_table_rows_in_table5_layout_with_fisher_z_intervals() -> None:
    result = _tables.semantic_table(_record("flickr8k"), [("t1", "best dev semantic")])
    table = result.table
    # subtasks first, then STS-B and SICK-R, as Table 5; the year aggregates are not rows
    assert list(dict.fromkeys(table["key"])) == [MSRPAR, "stsb_pearson", "sickr_pearson"]
    ours = table[(table["model"] == "t1") & (table["key"] == MSRPAR)].iloc[0]
    low, high = pearson_ci(0.5, 750)
    assert (ours["task"], ours["subtask"], ours["n"]) == ("STS12", "MSRpar", 750)
    assert (ours["r"], ours["ci_low"], ours["ci_high"]) == pytest.approx(
        (50.0, 100 * low, 100 * high)
    )
    paper = table[(table["source"] == reference.SEMANTIC_SOURCE) & (table["key"] == MSRPAR)].iloc[0]
    assert paper["model"] == "char-GRU Flickr8k (paper)"
    assert (paper["r"], paper["ci_low"], paper["ci_high"]) == pytest.approx((49.1, 43.5, 54.3))
    sick = table[(table["source"] == reference.SEMANTIC_SOURCE) & (table["key"] == "sickr_pearson")]
    assert sick["r"].item() == pytest.approx(81.5)
    shown = _tables.format_semantic(table)
    assert shown.columns.tolist() == [
        "task", "subtask", "n", "t1 (best dev semantic)", "char-GRU Flickr8k (paper)"
    ]  # fmt: skip
    assert shown.iloc[0].tolist()[:3] == ["STS12", "MSRpar", "750"]
    assert shown.iloc[0, 4] == "49.1 [43.5, 54.3]"


SUPERVISED = {
    "stsb_pearson": 0.70, "sickr_pearson": 0.80,
    "stsb_cosine_pearson": 0.725, "sickr_cosine_pearson": 0.712,
}  # fmt: skip
LABELS = {
    "stsb_pearson": ("STS-B", "test"), "stsb_cosine_pearson": ("STS-B", "test, cosine"),
    "sickr_pearson": ("SICK-R", "test"), "sickr_cosine_pearson": ("SICK-R", "test, cosine"),
}  # fmt: skip


def test_table5_names_every_row_under_its_own_task_on_the_page() -> None:
    """Each row of the page's Table 5 sits under the task of its CSV row: a blank task
    cell continues the task above it, so a task's rows must be consecutive."""
    trial = {"trial_id": "t1", **{names.key(names.ENSEMBLE, k): v for k, v in SUPERVISED.items()}}
    record = make_record(
        [trial],
        dataset="flickr8k",
        pair_counts={MSRPAR: 750, **dict.fromkeys(SUPERVISED, 1379)},
        semantic_labels={MSRPAR: ("STS12", "MSRpar"), **LABELS},
    )
    record.trials[names.key(names.ENSEMBLE, MSRPAR)] = 0.5
    table = _tables.semantic_table(record, [("t1", "best dev semantic")]).table
    page = Section("t", "t").table(_tables.format_semantic(table), text_columns=2).parts[-1]
    (rows,) = html_tables(page)
    assert rows[0][:3] == ["task", "subtask", "n"]
    shown, task = [], ""
    for cells in rows[1:]:
        task = cells[0] or task
        shown.append((task, cells[1], cells[3]))
    ours = table[table["model"] == "t1"]
    assert shown == [
        (t, s, f"{r:.1f} [{lo:.1f}, {hi:.1f}]")
        for t, s, r, lo, hi in zip(
            ours["task"], ours["subtask"], ours["r"], ours["ci_low"], ours["ci_high"], strict=True
        )
    ]
    assert [s[:2] for s in shown] == [
        ("STS12", "MSRpar"), ("STS-B", "test, senteval encoding"), ("STS-B", "test, cosine"),
        ("SICK-R", "test"), ("SICK-R", "test, cosine"),
    ]  # fmt: skip
    assert ("STS-B", "test, cosine", "72.5 [69.9, 74.9]") in shown


def test_a_task_whose_rows_are_apart_is_named_again() -> None:
    table = pd.DataFrame(
        {
            "task": ["A", "B", "A"], "subtask": ["x", "y", "z"], "key": ["a", "b", "c"],
            "n": [10, 10, 10], "model": "m", "source": "ours: x", "r": [50.0, 60.0, 70.0],
            "ci_low": [40.0, 50.0, 60.0], "ci_high": [60.0, 70.0, 80.0],
        }
    )  # fmt: skip
    assert _tables.format_semantic(table)["task"].tolist() == ["A", "B", "A"]


def test_semantic_table_of_a_suite_that_is_not_senteval() -> None:
    trial = {"trial_id": "t1", names.key(names.ENSEMBLE, "sts13_long_sentences_pearson"): 0.25}
    record = make_record(
        [trial], dataset="flickr8k", pair_counts={"sts13_long_sentences_pearson": 60}
    )
    result = _tables.semantic_table(record, [("t1", "x")])
    row = result.table.iloc[0]
    assert (row["task"], row["subtask"], row["n"], row["r"]) == (
        "STS13",
        "long sentences",
        60,
        25.0,
    )
    assert result.note == "the semantic sets are not SentEval's: no paper reference"


def test_unknown_data_set_says_so() -> None:
    note = _tables.retrieval_table(_record(None), [("t1", "x")]).note
    assert note.startswith("the data set is unknown")


# -- the hard-coded reference numbers reproduce the paper's printed intervals ----------


@pytest.mark.parametrize(("dataset", "images"), [("flickr8k", 1000), ("coco", 5000)])
def test_retrieval_references_reproduce_their_intervals(dataset: str, images: int) -> None:
    ref = reference.RETRIEVAL[dataset]
    for name, half in ref.half_widths.items():
        _, high = recall_ci(ref.values[name], images)
        assert round(high - ref.values[name], 1) == half, name


@pytest.mark.parametrize("dataset", ["flickr8k", "coco"])
def test_semantic_references_reproduce_their_intervals(dataset: str) -> None:
    _, refs = reference.SEMANTIC[dataset]
    assert len(refs) == 26  # 24 STS subtasks, STS-B, SICK-R
    for key, ref in refs.items():
        low, high = pearson_ci(ref.r / 100, reference.OFFICIAL_PAIRS[key])
        assert (round(100 * high - ref.r, 1), round(ref.r - 100 * low, 1)) == (ref.plus, ref.minus)
    assert not math.isnan(refs["sickr_pearson"].plus)


def test_table5_holds_the_baselines_per_subtask() -> None:
    """Where the search computed the store's baselines, each is a column of Table 5 with
    its own Fisher-z intervals, so the table shows on which subtasks the model wins."""
    record = _record(
        "synthetic",
        baselines={
            "ngram_ridge": {names.key(names.TEST, "sickr_pearson"): 0.7, "dev/semantic": 0.6},
            "char_ngrams": {names.key(names.TEST, MSRPAR): 0.3},
            "chance": {names.key(names.TEST, "r10_mean"): 1.0},
        },
    )
    table = _tables.semantic_table(record, [("t1", "best dev semantic")]).table
    ridge = table[table["model"] == "char n-gram ridge"]
    assert ridge["source"].tolist() == ["baseline"] and ridge["key"].tolist() == ["sickr_pearson"]
    low, high = pearson_ci(0.7, reference.OFFICIAL_PAIRS["sickr_pearson"])
    assert ridge[["r", "ci_low", "ci_high"]].iloc[0].tolist() == pytest.approx(
        [70.0, 100 * low, 100 * high]
    )
    assert table[table["model"] == "char n-gram cosine"]["key"].tolist() == [MSRPAR]
    assert "chance" not in set(table["model"])
    assert "char n-gram ridge" in _tables.format_semantic(table).columns
