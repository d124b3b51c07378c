"""Metric names, defined once and used everywhere downstream: Tune's ``metric=``,
MLflow keys, analysis columns and report tables.

A reported metric is ``"<split>/<name>"``: ``split`` is ``dev`` (evaluated after every
epoch on the store's ``val`` split and the semantic sets) or ``test`` (the final
snapshot ensemble). ``name`` is one of the names below.
"""

from __future__ import annotations

import re

DEV = "dev"
TEST = "test"

# Retrieval (SPEC section 5): R@K in percent, ranks 1-based; c2i = caption->image query.
RETRIEVAL = (
    "c2i_r1",
    "c2i_r5",
    "c2i_r10",
    "c2i_medr",
    "c2i_meanr",
    "i2c_r1",
    "i2c_r5",
    "i2c_r10",
    "i2c_medr",
    "i2c_meanr",
    "r10_mean",  # mean of c2i_r10 and i2c_r10: the paper's model-selection score
)

# Semantic (SPEC section 5): Pearson/Spearman x 1 (not x100), in [-1, 1].
STS_YEARS = ("sts12", "sts13", "sts14", "sts15", "sts16")
SEMANTIC = (
    *(f"{year}_pearson" for year in STS_YEARS),  # per year: pair-weighted mean over subtasks
    *(f"{year}_pearson_mean" for year in STS_YEARS),  # per year: plain mean over subtasks
    "sts12_16_pearson",  # mean of the five per-year pair-weighted Pearsons
    "stsb_pearson",
    "stsb_spearman",
    "stsb_mse",
    "sickr_pearson",
    "sickr_spearman",
    "sickr_mse",
    "semantic",  # the combined score of the trade-off curves (see trainables.semantic)
)

LOSS = "train/loss"
PRIMARY_RETRIEVAL = f"{DEV}/r10_mean"
PRIMARY_SEMANTIC = f"{DEV}/semantic"
# The search's objectives: the best value of a dev metric over the epochs so far (the
# paper selects on dev retrieval; the semantic score peaks early, so its best matters).
BEST_RETRIEVAL = f"{PRIMARY_RETRIEVAL}_best"
BEST_SEMANTIC = f"{PRIMARY_SEMANTIC}_best"


def best(metric: str) -> str:
    """``best("dev/r10_mean") == "dev/r10_mean_best"``."""
    return f"{metric}_best"


def key(split: str, name: str) -> str:
    """``key("dev", "r10_mean") == "dev/r10_mean"``."""
    return f"{split}/{name}"


def subtask_key(year: str, subtask: str, statistic: str) -> str:
    """Per-subtask STS metric name: ``subtask_key("STS12", "surprise.OnWN", "pearson")
    == "sts12_surprise_onwn_pearson"``."""
    slug = re.sub(r"[^a-z0-9]+", "_", subtask.lower()).strip("_")
    return f"{year.lower()}_{slug}_{statistic}"
