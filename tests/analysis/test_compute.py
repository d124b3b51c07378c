"""What the report computes, checked on records with known values (no drawing)."""

from __future__ import annotations

import math

import pytest

from analysis import _compute
from analysis._data import CATEGORICAL, CONTINUOUS
from analysis._sections import shapes_text
from gridsearch.tracking import TradeoffCurve
from tests.analysis.helpers import make_record
from trainables import names
from trainables.metrics import pearson_ci, recall_ci

R, S = names.PRIMARY_RETRIEVAL, names.PRIMARY_SEMANTIC
STSB, SICK = (names.key(names.DEV, part) for part in names.DEV_SEMANTIC_PARTS)


def _history(trial_id: str, points: list[tuple[float, float]]) -> list[dict[str, object]]:
    return [{"trial_id": trial_id, "epoch": e, R: r, S: s} for e, (r, s) in enumerate(points)]


def test_pareto_over_trial_epoch_pairs_finds_the_known_front() -> None:
    # a: (10, .5) (20, .6) (30, .55); b: (25, .7) (35, .4) (30, .55) - the (30, .55) tie
    # is on the front once per trial (neither dominates the other).
    history = _history("a", [(10, 0.5), (20, 0.6), (30, 0.55)]) + _history(
        "b", [(25, 0.7), (35, 0.4), (30, 0.55)]
    )
    record = make_record(
        [{"trial_id": "a", "margin": 0.1}, {"trial_id": "b", "margin": 0.3}],
        history,
        param_kinds={"margin": CONTINUOUS},
    )
    result = _compute.pareto_over_epochs(record)
    front = list(zip(result.front["trial_id"], result.front["epoch"], strict=True))
    assert front == [("b", 1), ("a", 2), ("b", 2), ("b", 0)]  # retrieval descending
    assert result.front["margin"].tolist() == [0.3, 0.1, 0.3, 0.3]  # the configuration
    assert result.points["on_front"].sum() == 4
    assert not result.points.query("trial_id == 'a' and epoch == 0")["on_front"].item()


def test_pareto_over_trials_uses_each_trials_best_values() -> None:
    record = make_record(
        [
            {"trial_id": "a", names.BEST_RETRIEVAL: 60.0, names.BEST_SEMANTIC: 0.70},
            {"trial_id": "b", names.BEST_RETRIEVAL: 70.0, names.BEST_SEMANTIC: 0.60},
            {"trial_id": "c", names.BEST_RETRIEVAL: 55.0, names.BEST_SEMANTIC: 0.65},
            {"trial_id": "d", names.BEST_RETRIEVAL: math.nan, names.BEST_SEMANTIC: 0.9},
        ]
    )
    result = _compute.pareto_over_trials(record)
    assert result.front["trial_id"].tolist() == ["b", "a"]


def test_best_semantic_epoch_marks_the_peak_of_each_curve() -> None:
    history = _history("a", [(5, 0.40), (30, 0.62), (40, 0.61), (50, 0.58)])
    history += _history("b", [(5, 0.40), (30, 0.45), (40, 0.50), (50, 0.52)])
    history.append({"trial_id": "b", "epoch": 4, R: 55.0, S: math.nan})  # not evaluated
    record = make_record([{"trial_id": "a"}, {"trial_id": "b"}], history)
    curves = _compute.tradeoff_curves(record)
    assert curves["a"].best_semantic_epoch == 1
    assert curves["b"].best_semantic_epoch == 3
    assert curves["b"].epochs == [0, 1, 2, 3, 4]  # epoch 0 (untrained) included
    assert math.isnan(curves["b"].semantic[4])
    assert _compute.best_semantic_epochs(record) == {"a": 1, "b": 3}


def test_sensitivity_intervals_are_the_recall_and_fisher_z_intervals() -> None:
    history = [
        {"trial_id": "a", "epoch": 0, R: 10.0, S: 0.5, STSB: 0.6, SICK: 0.4},
        {"trial_id": "a", "epoch": 1, R: 40.0, S: 0.55, STSB: 0.7, SICK: 0.4},
    ]
    record = make_record(
        [
            {
                "trial_id": "a",
                "margin": 0.2,
                "rnn_type": "gru",
                names.BEST_RETRIEVAL: 40.0,
                names.BEST_SEMANTIC: 0.55,
                names.FINISHED: 50.0,
            },
            {"trial_id": "b", "margin": 0.4, "rnn_type": "lstm", names.BEST_RETRIEVAL: 20.0},
        ],
        history,
        param_kinds={"margin": CONTINUOUS, "rnn_type": CATEGORICAL},
        split_images={"val": 100, "test": 1000},
        pair_counts={STSB: 500, SICK: 200, "sickr_pearson": 4000},  # the dev parts' pairs
    )
    table = _compute.sensitivity(record)
    margin = table[table["param"] == "margin"].set_index(["trial_id", "metric"])
    assert len(margin) == 4  # trial b has neither a semantic score nor test metrics
    row = margin.loc[("a", names.BEST_RETRIEVAL)]
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(recall_ci(40.0, 100))
    row = margin.loc[("a", names.FINISHED)]
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(recall_ci(50.0, 1000))
    sts, sick = pearson_ci(0.7, 500), pearson_ci(0.4, 200)  # the parts at epoch 1, the peak
    row = margin.loc[("a", names.BEST_SEMANTIC)]
    assert row["ci_low"] == pytest.approx((sts[0] + sick[0]) / 2)
    assert row["ci_high"] == pytest.approx((sts[1] + sick[1]) / 2)
    assert row["ci_low"] < row["estimate"] < row["ci_high"]
    kinds = table.drop_duplicates("param").set_index("param")["kind"].to_dict()
    assert kinds == {"margin": CONTINUOUS, "rnn_type": CATEGORICAL}


def test_sensitivity_without_sample_sizes_has_no_intervals() -> None:
    record = make_record(
        [{"trial_id": "a", "margin": 0.2, names.BEST_RETRIEVAL: 40.0}],
        param_kinds={"margin": CONTINUOUS},
    )
    table = _compute.sensitivity(record)
    assert len(table) == 1 and math.isnan(table["ci_low"].item())


def test_margin_range_check_compares_inside_and_outside_the_papers_range() -> None:
    trials = [
        {"trial_id": str(i), "margin": m, names.BEST_RETRIEVAL: r}
        for i, (m, r) in enumerate([(0.05, 30.0), (0.18, 55.0), (0.22, 50.0), (0.45, 40.0)])
    ]
    record = make_record(trials, param_kinds={"margin": CONTINUOUS})
    (check,) = _compute.margin_range_check(_compute.sensitivity(record))
    assert check == _compute.RangeCheck(names.BEST_RETRIEVAL, 2, 2, 55.0, 40.0, 0.18)


def test_best_trials_are_finished_and_deduplicated() -> None:
    test_r10 = names.FINISHED
    record = make_record(
        [
            {"trial_id": "a", names.BEST_RETRIEVAL: 90.0, names.BEST_SEMANTIC: 0.9},  # unfinished
            {"trial_id": "b", names.BEST_RETRIEVAL: 70.0, names.BEST_SEMANTIC: 0.6, test_r10: 1.0},
            {"trial_id": "c", names.BEST_RETRIEVAL: 60.0, names.BEST_SEMANTIC: 0.5, test_r10: 1.0},
        ]
    )
    labels = {names.BEST_RETRIEVAL: "by R", names.BEST_SEMANTIC: "by S"}
    assert _compute.best_trials(record, labels) == [("b", "by R, by S")]
    assert _compute.best_trials(make_record([{"trial_id": "a"}]), labels) == []


def test_each_trials_curves_are_said_as_they_are_not_as_the_paper_has_them() -> None:
    """The report says what the run shows: a trial with the paper's trade-off (semantic
    peaking, then falling while retrieval rises), one whose semantic score still rises at
    its last epoch, one whose retrieval fell after the peak too; NaN epochs (no semantic
    evaluation) and epoch 0 do not count."""
    nan = math.nan
    curves = {
        "paper": TradeoffCurve([0, 1, 2, 3], [5.0, 60.0, 62.0, 66.0], [0.3, 0.6, 0.7, 0.65], 2),
        "rising": TradeoffCurve([0, 1, 2], [5.0, 60.0, 61.0], [0.9, 0.6, 0.7], 2),
        "fell": TradeoffCurve([0, 1, 2, 3], [5.0, 64.0, 62.0, 60.0], [0.3, 0.7, nan, 0.6], 1),
    }
    shapes = _compute.tradeoff_shapes(curves)
    assert shapes == _compute.TradeoffShapes(["paper"], ["rising"], ["fell"], 3)
    said = shapes_text(shapes)
    assert said.startswith("In these runs (up to epoch 3): in 1 of 3, the dev semantic score")
    assert (
        "as in the paper's Fig. 4 (paper)" in said and "highest at the last epoch (rising)" in said
    )
    assert "no higher at the last epoch than at that peak (fell)" in said
    none = shapes_text(_compute.tradeoff_shapes({"rising": curves["rising"]}))
    assert "in all, the dev semantic score is highest at the last epoch" in none
    assert "Fig. 4 (" not in none  # no trial is said to show what none shows
    assert shapes_text(_compute.tradeoff_shapes({})) == ""


@pytest.mark.parametrize(
    ("theirs", "verdict"),
    [
        (0.60, "ahead by more than the interval"),
        (0.69, "ahead, within the interval"),
        (0.75, "behind"),
    ],
)
def test_the_best_semantic_trial_against_the_baselines(theirs: float, verdict: str) -> None:
    """The trial chosen on dev semantic, its test semantic with the interval of its two
    parts (Fisher z over their pairs, endpoints averaged) against each baseline's."""
    semantic, sts, sick = (
        names.key(names.ENSEMBLE, k) for k in ("semantic", "sts12_16_pearson", "sickr_pearson")
    )
    trials = [
        {"trial_id": "a", names.BEST_SEMANTIC: 0.5, semantic: 0.9, sts: 0.9, sick: 0.9},
        {"trial_id": "b", names.BEST_SEMANTIC: 0.6, semantic: 0.7, sts: 0.72, sick: 0.68},
    ]
    record = make_record(
        trials,
        pair_counts={"sts12_16_pearson": 3000, "sickr_pearson": 500},
        baselines={"ngram_ridge": {names.key(names.TEST, "semantic"): theirs}},
    )
    [row] = _compute.semantic_against_baselines(record).to_dict("records")
    (sts_low, sts_high), (sick_low, sick_high) = pearson_ci(0.72, 3000), pearson_ci(0.68, 500)
    assert row["trial_id"] == "b" and row["test semantic"] == 0.7  # chosen on dev, not test
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(
        ((sts_low + sick_low) / 2, (sts_high + sick_high) / 2)
    )
    assert (row["baseline"], row["its score"]) == ("char n-gram ridge", theirs)
    assert row["verdict"] == verdict
