"""The paper's own numbers, hard-coded once, for the report's tables.

Sources (both in ``/work/shared``):

- Merkx & Frank (2019), "Learning semantic sentence representations from visually
  grounded language without lexical knowledge": Table 2 (Flickr8k test retrieval),
  Table 3 (MSCOCO test retrieval, 5k and 1k) and Table 5 (STS Pearson r x 100 with 95%
  intervals), char-GRU rows/columns (embedding 2048, n = 1024);
- docs/protocols.md section 6 (the same numbers, distilled, plus SICK-R: Flickr8k 81.5, MSCOCO 82.7,
  which the paper reports in its Fig. 3 but not in Table 5) and section 4 (the pair
  counts of every STS subtask after dropping empty gold lines).

Retrieval R@K and Pearson r are in percent (x 100), as printed in the paper. Keys are
the metric names of :mod:`trainables.names`, so a reference lines up with our metrics
by name; a data set without an entry here has no reference ("synthetic", "flickr30k").
"""

from __future__ import annotations

from typing import NamedTuple

from trainables import names
from trainables.stats import pearson_ci

__all__ = [
    "MARGIN_STABLE_RANGE",
    "OFFICIAL_LABELS",
    "OFFICIAL_PAIRS",
    "RETRIEVAL",
    "SEMANTIC",
    "SEMANTIC_SOURCE",
    "SICKR_DEV_PAIRS",
    "SICKR_TEST_PAIRS",
    "STSB_DEV_PAIRS",
    "STSB_TEST_PAIRS",
    "RetrievalReference",
    "SemanticReference",
]


class RetrievalReference(NamedTuple):
    label: str  # the row label in the report
    source: str  # where the numbers come from
    values: dict[str, float]  # c2i_r1 ... i2c_medr, R@K in percent
    half_widths: dict[str, float]  # the paper's +- for each R@K


class SemanticReference(NamedTuple):
    r: float  # Pearson r x 100
    plus: float  # upper half-width of the 95% interval, x 100
    minus: float  # lower half-width, x 100


_RETRIEVAL_COLUMNS = ("c2i_r1", "c2i_r5", "c2i_r10", "c2i_medr", "i2c_r1", "i2c_r5", "i2c_r10")


def _retrieval(label: str, source: str, row: str) -> RetrievalReference:
    """``row``: the paper's table row, "27.5±2.8 58.2±3.1 ..." in its column order."""
    cells = row.split()
    values: dict[str, float] = {}
    half: dict[str, float] = {}
    for name, cell in zip((*_RETRIEVAL_COLUMNS, "i2c_medr"), cells, strict=True):
        value, _, width = cell.partition("±")
        values[name] = float(value)
        if width:
            half[name] = float(width)
    return RetrievalReference(label, source, values, half)


# Our test metrics are on the whole test split: 1,000 Flickr8k images (Table 2) and the
# 5,000-image MSCOCO split, i.e. the paper's "5k" rows (Table 3).
RETRIEVAL: dict[str, RetrievalReference] = {
    "flickr8k": _retrieval(
        "char-GRU (paper)",
        "Merkx & Frank 2019, Table 2 (Flickr8k test)",
        "27.5±2.8 58.2±3.1 70.5±2.8 4.0 38.5±3.0 68.9±2.9 79.3±2.5 2.0",
    ),
    "coco": _retrieval(
        "char-GRU (paper, 5k)",
        "Merkx & Frank 2019, Table 3 (MSCOCO test, 5k)",
        "20.2±1.1 46.9±1.4 60.9±1.4 6.0 25.7±1.2 54.3±1.4 68.8±1.3 4.0",
    ),
}

# Table 5, char-GRU columns: (subtask as SentEval names it, Flickr8k model, MSCOCO model),
# each "r +plus -minus". The paper prints "OnWN"/"SMTnews" for STS12's surprise.* sets,
# "HDL" for headlines, and misspells SMTeuroparl.
_TABLE5 = {
    "STS12": (
        ("MSRpar", "49.1 5.2 5.6", "37.6 6.0 6.3"),
        ("MSRvid", "79.9 2.4 2.7", "82.7 2.1 2.4"),
        ("SMTeuroparl", "57.3 5.8 6.5", "54.2 6.2 6.8"),
        ("surprise.OnWN", "67.5 3.7 4.1", "65.5 3.9 4.3"),
        ("surprise.SMTnews", "51.1 6.9 7.6", "38.7 8.0 8.7"),
    ),
    "STS13": (
        ("FNWN", "23.8 13.0 13.9", "23.2 13.1 14.0"),
        ("headlines", "67.3 3.7 4.1", "64.9 4.0 4.3"),
        ("OnWN", "59.8 5.1 5.6", "58.5 5.2 5.7"),
    ),
    "STS14": (
        ("deft-forum", "50.7 6.6 7.2", "51.5 6.5 7.1"),
        ("deft-news", "67.8 5.7 6.6", "65.3 6.0 7.0"),
        ("headlines", "61.6 4.3 4.6", "60.0 4.4 4.8"),
        ("images", "81.4 2.3 2.6", "88.2 1.5 1.7"),
        ("OnWN", "68.6 3.6 4.0", "68.1 3.7 4.0"),
        ("tweet-news", "74.0 3.1 3.4", "69.6 3.5 3.9"),
    ),
    "STS15": (
        ("answers-forums", "57.6 6.4 7.2", "49.4 7.3 8.1"),
        ("answers-students", "68.8 3.6 4.0", "67.1 3.8 4.1"),
        ("belief", "71.8 4.6 5.3", "66.5 5.3 6.1"),
        ("headlines", "70.3 3.4 3.8", "67.1 3.8 4.1"),
        ("images", "89.2 1.4 1.6", "88.1 1.5 1.7"),
    ),
    "STS16": (
        ("answer-answer", "53.8 8.2 9.4", "47.8 9.0 10.1"),
        ("headlines", "70.0 5.8 6.9", "65.4 6.6 7.7"),
        ("plagiarism", "78.6 4.5 5.5", "75.8 5.0 6.1"),
        ("postediting", "84.4 3.3 4.0", "79.7 4.2 5.1"),
        ("question-question", "40.5 10.8 12.0", "49.9 9.5 10.9"),
    ),
}

# docs/protocols.md section 4: pairs per subtask after dropping empty gold lines; STS-B
# and SICK-R test.
_PAIRS = {
    "STS12": (750, 750, 459, 750, 399),
    "STS13": (189, 750, 561),
    "STS14": (450, 300, 750, 750, 750, 750),
    "STS15": (375, 750, 375, 750, 750),
    "STS16": (254, 249, 230, 244, 209),
}
STSB_TEST_PAIRS = 1379
SICKR_TEST_PAIRS = 4927
STSB_DEV_PAIRS = 1500  # docs/protocols.md section 4: sts-dev.csv
SICKR_DEV_PAIRS = 500  # SICK_trial.txt


def _semantic(cell: str) -> SemanticReference:
    r, plus, minus = (float(v) for v in cell.split())
    return SemanticReference(r, plus, minus)


def _sickr(r: float) -> SemanticReference:
    """docs/protocols.md section 6 gives SICK-R without its interval: the Fisher-z one (which
    reproduces every interval the paper prints)."""
    low, high = pearson_ci(r / 100, SICKR_TEST_PAIRS)
    return SemanticReference(r, round(100 * high - r, 1), round(r - 100 * low, 1))


def _semantic_references(column: int) -> dict[str, SemanticReference]:
    refs = {
        names.subtask_key(year, subtask, "pearson"): _semantic(cells[column])
        for year, rows in _TABLE5.items()
        for subtask, *cells in rows
    }
    refs["stsb_pearson"] = _semantic(("72.2 2.4 2.6", "70.7 2.5 2.7")[column])
    refs["sickr_pearson"] = _sickr((81.5, 82.7)[column])
    return refs


# Keyed by the training data set (the store manifest's ``dataset``).
SEMANTIC: dict[str, tuple[str, dict[str, SemanticReference]]] = {
    "flickr8k": ("char-GRU Flickr8k (paper)", _semantic_references(0)),
    "coco": ("char-GRU MSCOCO (paper)", _semantic_references(1)),
}
SEMANTIC_SOURCE = "Merkx & Frank 2019, Table 5; SICK-R from docs/protocols.md section 6"

# Pair counts of the official SentEval sets, keyed like the metrics (used for intervals
# when the search's SentEval directory cannot be read here).
OFFICIAL_PAIRS: dict[str, int] = {
    names.subtask_key(year, subtask, "pearson"): count
    for year, rows in _TABLE5.items()
    for (subtask, *_), count in zip(rows, _PAIRS[year], strict=True)
}
OFFICIAL_PAIRS["stsb_pearson"] = OFFICIAL_PAIRS["stsb_cosine_pearson"] = STSB_TEST_PAIRS
OFFICIAL_PAIRS["sickr_pearson"] = OFFICIAL_PAIRS["sickr_cosine_pearson"] = SICKR_TEST_PAIRS
# The dev score's parts (keyed with their split: the same names on test have other counts).
OFFICIAL_PAIRS[names.key(names.DEV, "stsb_cosine_pearson")] = STSB_DEV_PAIRS
OFFICIAL_PAIRS[names.key(names.DEV, "sickr_cosine_pearson")] = SICKR_DEV_PAIRS
# Row labels (task, subtask) of the semantic table, in Table 5's order.
OFFICIAL_LABELS: dict[str, tuple[str, str]] = {
    names.subtask_key(year, subtask, "pearson"): (year, subtask)
    for year, rows in _TABLE5.items()
    for subtask, *_ in rows
}
OFFICIAL_LABELS["stsb_pearson"] = ("STS-B", "test")
OFFICIAL_LABELS["sickr_pearson"] = ("SICK-R", "test")
OFFICIAL_LABELS["stsb_cosine_pearson"] = ("STS-B", "test, cosine")
OFFICIAL_LABELS["sickr_cosine_pearson"] = ("SICK-R", "test, cosine")

# The paper's stable range of the hinge margin (section 3.3): best at 0.2, "relatively
# stable in the range 0.15 <= alpha <= 0.25", degrading quickly outside.
MARGIN_STABLE_RANGE = (0.15, 0.25)
