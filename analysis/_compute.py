"""What the report shows, computed from a :class:`SearchRecord` (no drawing here):
trade-off curves, Pareto sets over trials and over (trial, epoch) pairs, and the
sensitivity of the final metrics to each searched parameter, with 95% intervals."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
import pandas as pd

from analysis._data import FAMILY, SearchRecord
from analysis.reference import MARGIN_STABLE_RANGE
from gridsearch.summary import BASELINE_LABELS, TrialOutcome, best_trial, pareto_front
from gridsearch.tracking import TradeoffCurve, tradeoff_curve
from trainables import names
from trainables.stats import pearson_ci, recall_ci

ENSEMBLE_RETRIEVAL = names.FINISHED  # the snapshot ensemble's test R@10 mean
_DEV_PARTS = tuple(names.key(names.DEV, part) for part in names.DEV_SEMANTIC_PARTS)


class SensitivityMetric(NamedTuple):
    key: str  # the trials' column
    label: str  # axis label
    split: str  # the store split its retrieval interval counts images of ("" = semantic)


SENSITIVITY_METRICS = (
    SensitivityMetric(names.BEST_RETRIEVAL, "best dev R@10 mean (%)", "val"),
    SensitivityMetric(names.BEST_SEMANTIC, "best dev semantic (r)", ""),
    SensitivityMetric(ENSEMBLE_RETRIEVAL, "test R@10 mean, ensemble (%)", "test"),
)


class ParetoSet(NamedTuple):
    points: pd.DataFrame  # trial_id (, epoch), retrieval, semantic, on_front
    front: pd.DataFrame  # the points on the front, retrieval descending, with the config


class TradeoffShapes(NamedTuple):
    """What each trial's dev curves did after its dev semantic score peaked (trial ids):
    ``tradeoff`` the paper's Fig. 4 (the peak before the last epoch, the semantic score
    lower at it and dev R@10 mean higher there than at the peak); ``still_rising`` the
    semantic score highest at the last epoch; ``both_fell`` the peak before the last
    epoch and dev R@10 mean no higher at it than at the peak. ``last``: the latest epoch
    any trial reached."""

    tradeoff: list[str]
    still_rising: list[str]
    both_fell: list[str]
    last: int


def tradeoff_shapes(curves: Mapping[str, TradeoffCurve]) -> TradeoffShapes:
    """Each trial's curves sorted into ``TradeoffShapes``, on its trained epochs (1 on)
    where it has both values; a trial with none is left out."""
    shapes = TradeoffShapes([], [], [], 0)
    for trial_id, curve in curves.items():
        points = {
            e: (r, s)
            for e, r, s in zip(curve.epochs, curve.retrieval, curve.semantic, strict=True)
            if e > 0 and not (math.isnan(r) or math.isnan(s))
        }
        if not points:
            continue
        last = max(points)
        peak = max(points, key=lambda e: (points[e][1], e))  # the later of equal peaks
        shapes = shapes._replace(last=max(shapes.last, last))
        if peak == last:
            shapes.still_rising.append(trial_id)
        elif points[last][0] > points[peak][0]:
            shapes.tradeoff.append(trial_id)
        else:
            shapes.both_fell.append(trial_id)
    return shapes


def tradeoff_curves(record: SearchRecord) -> dict[str, TradeoffCurve]:
    """Each trial's dev R@10 mean and dev semantic score per epoch (the paper's Fig. 4),
    with the epoch where its semantic score peaks."""
    curves = {}
    for trial_id, rows in record.history.groupby("trial_id", sort=False):
        history = {
            key: [(int(e), float(v)) for e, v in zip(rows["epoch"], rows[key], strict=True)]
            for key in (names.PRIMARY_RETRIEVAL, names.PRIMARY_SEMANTIC)
        }
        history = {
            k: [(e, v) for e, v in pairs if not math.isnan(v)] for k, pairs in history.items()
        }
        curve = tradeoff_curve(history, names.PRIMARY_RETRIEVAL, names.PRIMARY_SEMANTIC)
        if curve.epochs:
            curves[str(trial_id)] = curve
    return curves


def trial_outcomes(record: SearchRecord) -> list[TrialOutcome]:
    """The trials as gridsearch.summary sees them (searched config, final metrics)."""
    metric_columns = [c for c in record.trials.columns if "/" in c]
    outcomes = []
    for row in record.trials.to_dict("records"):
        metrics = {k: float(row[k]) for k in metric_columns if not _missing(row[k])}
        config = {p: row[p] for p in record.searched}
        outcomes.append(TrialOutcome(str(row["trial_id"]), config, metrics, str(row["outcome"])))
    return outcomes


def pareto_over_trials(record: SearchRecord) -> ParetoSet:
    """Trials' best dev R@10 mean against their best dev semantic score."""
    outcomes = trial_outcomes(record)
    points = pd.DataFrame(
        {
            "trial_id": [o.trial_id for o in outcomes],
            "retrieval": [o.retrieval for o in outcomes],
            "semantic": [o.semantic for o in outcomes],
        }
    )
    return _pareto(points, record)


def pareto_over_epochs(record: SearchRecord) -> ParetoSet:
    """Every (trial, epoch) pair: a model after that epoch is a candidate on its own."""
    points = record.history[["trial_id", "epoch"]].copy()
    points["retrieval"] = record.history[names.PRIMARY_RETRIEVAL]
    points["semantic"] = record.history[names.PRIMARY_SEMANTIC]
    return _pareto(points.reset_index(drop=True), record)


def _pareto(points: pd.DataFrame, record: SearchRecord) -> ParetoSet:
    pairs = list(
        zip(points["retrieval"].astype(float), points["semantic"].astype(float), strict=True)
    )
    front = pareto_front(pairs)
    points["on_front"] = points.index.isin(front)
    config = record.trials.set_index("trial_id")[[*record.searched, "outcome"]]
    table = points.loc[front].join(config, on="trial_id").drop(columns="on_front")
    return ParetoSet(points, table.reset_index(drop=True))


def tried(record: SearchRecord) -> dict[str, str]:
    """What each trial tried, by trial id: its family (when the families differ) and its
    values of the parameters its family searched, e.g. ``word_bow, lr_max=0.0005``."""
    searched_by = {p: record.searched_by(p) for p in record.searched}
    said = {}
    for index, row in record.trials.iterrows():
        parts = [
            str(row[p]) if p == FAMILY else f"{p}={short_value(row[p])}"
            for p in record.searched
            if searched_by[p].loc[index]
        ]
        said[str(row["trial_id"])] = ", ".join(parts) or "nothing searched"
    return said


def short_value(value: object) -> str:
    """A parameter's value, a float to 3 significant digits (0.000512, 0.213, 1e+03)."""
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def best_semantic_epochs(record: SearchRecord) -> dict[str, int]:
    return {
        trial_id: curve.best_semantic_epoch
        for trial_id, curve in tradeoff_curves(record).items()
        if curve.best_semantic_epoch is not None
    }


def sensitivity(record: SearchRecord) -> pd.DataFrame:
    """One row per (searched parameter, trial, metric) with the metric's 95% interval:
    the normal approximation for R@10 (``recall_ci``, n = the split's images), the
    Fisher-z interval for the semantic score (``pearson_ci``; see ``semantic_interval``).
    Trials without the metric are left out, and so is a parameter's row for a trial
    whose family did not search it (``SearchRecord.searched_by``)."""
    best_epochs = best_semantic_epochs(record)
    history = record.history.set_index(["trial_id", "epoch"])
    searched_by = {
        p: set(record.trials.loc[record.searched_by(p), "trial_id"]) for p in record.searched
    }
    rows = []
    for trial in record.trials.to_dict("records"):
        for metric in SENSITIVITY_METRICS:
            value = trial.get(metric.key, math.nan)
            if _missing(value):
                continue
            if metric.split:
                n = record.split_images.get(metric.split)
                low, high = recall_ci(value, n) if n else (math.nan, math.nan)
            else:
                epoch = best_epochs.get(str(trial["trial_id"]))
                parts = (
                    history.loc[(trial["trial_id"], epoch)] if epoch is not None else pd.Series()
                )
                low, high = semantic_interval(parts, record.pair_counts)
            for param, kind in record.param_kinds.items():
                if trial["trial_id"] not in searched_by[param]:
                    continue
                rows.append(
                    {
                        "param": param,
                        "kind": kind,
                        "value": trial[param],
                        "trial_id": trial["trial_id"],
                        "family": trial.get(FAMILY, ""),
                        "metric": metric.key,
                        "label": metric.label,
                        "estimate": float(value),
                        "ci_low": low,
                        "ci_high": high,
                    }
                )
    columns = ["param", "kind", "value", "trial_id", "family", "metric", "label", "estimate"]
    return pd.DataFrame(rows, columns=[*columns, "ci_low", "ci_high"])


def semantic_interval(
    parts: Mapping[str, float], pair_counts: Mapping[str, int], keys: tuple[str, ...] = _DEV_PARTS
) -> tuple[float, float]:
    """Approximate 95% interval of a semantic score that is the mean of the Pearsons
    ``keys`` (by default ``dev/semantic``'s: the cosine Pearsons on STS-B dev and SICK-R
    trial, at the epoch it peaked): each part's Fisher-z interval over its pairs,
    endpoints averaged. Averaging endpoints assumes the two errors move together, so it
    is conservative."""
    bounds = []
    for key in keys:
        r, n = parts.get(key, math.nan), pair_counts.get(key, 0)
        if not _missing(r) and n > 3:
            bounds.append(pearson_ci(float(r), n))
    if not bounds:
        return math.nan, math.nan
    return float(np.mean([b[0] for b in bounds])), float(np.mean([b[1] for b in bounds]))


# test/semantic and ensemble/semantic: (STS12-16 r + SICK-R r) / 2 (trainables.names); the
# STS part's interval counts all its pairs
_TEST_PARTS = ("sts12_16_pearson", "sickr_pearson")
_TEST_SEMANTIC = names.key(names.TEST, "semantic")


def semantic_against_baselines(record: SearchRecord) -> pd.DataFrame:
    """The best-semantic trial's snapshot ensemble (chosen on dev) against each baseline
    on the test semantic score: the trial's score with its 95% interval
    (``semantic_interval`` over the test parts), the baseline's, and whether the trial
    is ahead by more than that interval's lower half."""
    columns = ["trial_id", "test semantic", "ci_low", "ci_high", "baseline", "its score", "verdict"]
    best = best_trial(trial_outcomes(record), names.BEST_SEMANTIC)
    if best is None:
        return pd.DataFrame([], columns=columns)
    ours = best.metrics.get(names.key(names.ENSEMBLE, "semantic"), math.nan)
    parts = {k: best.metrics.get(names.key(names.ENSEMBLE, k), math.nan) for k in _TEST_PARTS}
    low, high = semantic_interval(parts, record.pair_counts, _TEST_PARTS)
    rows = []
    for name, label in BASELINE_LABELS.items():
        theirs = float(
            record.baselines.get(name, {}).get(names.key(names.TEST, "semantic"), math.nan)
        )
        if math.isnan(theirs) or math.isnan(ours):
            continue
        if theirs < low:
            verdict = "ahead by more than the interval"
        elif ours > theirs:
            verdict = "ahead, within the interval"
        else:
            verdict = "behind"
        rows.append([best.trial_id, ours, low, high, label, theirs, verdict])
    return pd.DataFrame(rows, columns=columns)


class RangeCheck(NamedTuple):
    metric: str
    inside: int  # trials with the margin in the paper's stable range
    outside: int
    best_inside: float  # the best value among them (NaN when none)
    best_outside: float
    best_margin: float  # the margin of the best trial overall


def margin_range_check(table: pd.DataFrame) -> list[RangeCheck]:
    """For a search over ``margin``: per metric, the best trial inside the paper's stable
    range 0.15-0.25 against the best outside it (does the range hold here?)."""
    low, high = MARGIN_STABLE_RANGE
    checks = []
    margins = table[table["param"] == "margin"]
    for metric, rows in margins.groupby("metric", sort=False):
        inside = rows["value"].astype(float).between(low, high)
        best = rows.loc[rows["estimate"].idxmax()]
        checks.append(
            RangeCheck(
                str(metric),
                int(inside.sum()),
                int((~inside).sum()),
                float(rows.loc[inside, "estimate"].max()) if inside.any() else math.nan,
                float(rows.loc[~inside, "estimate"].max()) if (~inside).any() else math.nan,
                float(best["value"]),
            )
        )
    return checks


def best_trials(record: SearchRecord, metrics: Mapping[str, str]) -> list[tuple[str, str]]:
    """``(trial_id, why)`` of the finished trial (one with test metrics) with the best
    value of each metric (``metrics``: name -> how to say it), deduplicated, in order:
    the models the paper tables show."""
    if ENSEMBLE_RETRIEVAL not in record.trials:
        return []
    finished = record.trials[record.trials[ENSEMBLE_RETRIEVAL].notna()]
    chosen: dict[str, str] = {}
    for metric, label in metrics.items():
        names.selectable(metric)  # the best rows are chosen on dev values only
        if metric not in finished or finished[metric].isna().all():
            continue
        trial_id = str(finished.loc[finished[metric].idxmax(), "trial_id"])
        chosen[trial_id] = f"{chosen[trial_id]}, {label}" if trial_id in chosen else label
    return list(chosen.items())


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


_BASELINE_COLUMNS = {
    names.PRIMARY_RETRIEVAL: "dev R@10 mean",
    names.PRIMARY_SEMANTIC: "dev semantic",
    names.key(names.TEST, "r10_mean"): "test R@10 mean",
    names.key(names.TEST, "semantic"): "test semantic",
}


class ReferenceLine(NamedTuple):
    label: str
    retrieval: float  # dev R@10 mean (NaN: the baseline has none, e.g. n-gram cosine)
    semantic: float  # dev semantic score (NaN: none, e.g. chance)


def baseline_table(record: SearchRecord) -> pd.DataFrame:
    """One row per baseline of the search's store: its dev values (what the curves are
    compared with) and test values (what the ensembles' test numbers are compared with)."""
    rows = []
    for name, label in BASELINE_LABELS.items():
        values = record.baselines.get(name)
        if values:
            rows.append(
                {
                    "baseline": label,
                    **{c: values.get(k, math.nan) for k, c in _BASELINE_COLUMNS.items()},
                }
            )
    return pd.DataFrame(rows, columns=["baseline", *_BASELINE_COLUMNS.values()])


def reference_lines(record: SearchRecord) -> list[ReferenceLine]:
    """The baselines' dev values, drawn across the trade-off curves."""
    return [
        ReferenceLine(
            label,
            float(record.baselines[name].get(names.PRIMARY_RETRIEVAL, math.nan)),
            float(record.baselines[name].get(names.PRIMARY_SEMANTIC, math.nan)),
        )
        for name, label in BASELINE_LABELS.items()
        if name in record.baselines
    ]
