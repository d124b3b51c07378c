"""The encoder families of one search side by side (README "Comparing families in one
search"), computed only (``analysis._figures`` draws them).

A trial's family is ``trainables.presets.family_of`` of its logged configuration
(``char_rnn``, ``word_bow``, ``char_rnn_heads2``, ``char_rnn_text``, ...), whatever space
drew it. Each family's best trial is chosen on dev values only, once on the paper's
selection (best dev R@10 mean) and once on the dev semantic score; its row reports that
trial's snapshot ensemble on the test data with 95% intervals. The two families whose
best trials rank first and second on dev retrieval are the pair the report tests
(``analysis.compare``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import pandas as pd

from analysis._compute import ENSEMBLE_RETRIEVAL, tradeoff_curves
from analysis._data import FAMILY, SearchRecord
from gridsearch.tracking import TradeoffCurve
from trainables import names
from trainables.presets import PRESETS
from trainables.stats import pearson_ci, recall_ci

__all__ = [
    "FAMILY",
    "SELECTIONS",
    "FamilyPair",
    "best_of_families",
    "family_curves",
    "family_order",
    "top_two",
]

# what a family's best trial is chosen on (dev only) -> how the table says it
SELECTIONS = {names.BEST_RETRIEVAL: "dev R@10 mean", names.BEST_SEMANTIC: "dev semantic"}
# the test numbers of each best trial's ensemble (``ensemble/<name>``): R@10 in percent
# and Pearson correlations
RECALLS = ("r10_mean", "c2i_r10", "i2c_r10")
CORRELATIONS = ("semantic", "sts12_16_pearson", "stsb_pearson", "sickr_pearson")


class FamilyPair(NamedTuple):
    a: str  # the runner-up family (A of analysis.compare: B - A is the leader's gain)
    b: str  # the family whose best trial has the best dev R@10 mean
    trial_a: str
    trial_b: str


def family_order(record: SearchRecord) -> list[str]:
    """The families among the trials: the presets' order first, then any other sorted."""
    present = set(record.trials.get(FAMILY, pd.Series(dtype=str)).dropna())
    return [f for f in PRESETS if f in present] + sorted(present - set(PRESETS))


def family_curves(record: SearchRecord) -> dict[str, dict[str, TradeoffCurve]]:
    """Each family's trials' trade-off curves (dev R@10 mean and dev semantic per epoch)."""
    curves = tradeoff_curves(record)
    family = record.trials.set_index("trial_id")[FAMILY]
    grouped: dict[str, dict[str, TradeoffCurve]] = {f: {} for f in family_order(record)}
    for trial_id, curve in curves.items():
        grouped[str(family.loc[trial_id])][trial_id] = curve
    return {f: c for f, c in grouped.items() if c}


def best_of_families(record: SearchRecord) -> pd.DataFrame:
    """One row per (family, selection): the family's finished trial with the best dev
    value of the selection, how many trials the family had and finished, that dev value,
    and the trial's ensemble on test: R@10 (mean, both directions; normal-approximation
    interval over the test images) and the semantic battery (Pearson r; Fisher-z
    intervals over each set's pairs). A family with no finished trial has no row."""
    trials = record.trials
    if FAMILY not in trials or ENSEMBLE_RETRIEVAL not in trials:
        return pd.DataFrame()
    n_images = record.split_images.get("test")
    rows = []
    for family in family_order(record):
        members = trials[trials[FAMILY] == family]
        finished = members[members[ENSEMBLE_RETRIEVAL].notna()]
        for metric, label in SELECTIONS.items():
            names.selectable(metric)  # chosen on dev values only
            if finished.empty or metric not in finished or finished[metric].isna().all():
                continue
            best = finished.loc[finished[metric].idxmax()]
            row: dict[str, object] = {
                "family": family,
                "selected on": label,
                "trial_id": best["trial_id"],
                "trials": len(members),
                "finished": len(finished),
                "dev value": float(best[metric]),
            }
            for name in RECALLS:
                value = _value(best, name)
                low, high = recall_ci(value, n_images) if n_images and math.isfinite(value) else (
                    math.nan, math.nan
                )  # fmt: skip
                row.update({name: value, f"{name}_ci_low": low, f"{name}_ci_high": high})
            for name in CORRELATIONS:
                value, n = _value(best, name), record.pair_counts.get(name, 0)
                low, high = pearson_ci(value, n) if n > 3 and math.isfinite(value) else (
                    math.nan, math.nan
                )  # fmt: skip
                row.update({name: value, f"{name}_ci_low": low, f"{name}_ci_high": high})
            rows.append(row)
    return pd.DataFrame(rows)


def _value(trial: pd.Series, name: str) -> float:
    value = trial.get(names.key(names.ENSEMBLE, name), math.nan)
    return math.nan if value is None or pd.isna(value) else float(value)


def top_two(best: pd.DataFrame) -> FamilyPair | None:
    """The two families whose best trials (by dev R@10 mean, the paper's selection)
    rank first and second: the pair the report tests. None with fewer than two."""
    if best.empty:
        return None
    ranked = best[best["selected on"] == SELECTIONS[names.BEST_RETRIEVAL]].sort_values(
        "dev value", ascending=False, kind="stable"
    )
    if len(ranked) < 2:
        return None
    leader, runner_up = ranked.iloc[0], ranked.iloc[1]
    return FamilyPair(
        str(runner_up["family"]), str(leader["family"]),
        str(runner_up["trial_id"]), str(leader["trial_id"]),
    )  # fmt: skip
