"""trainables.names: what may be selected on, and when a trial has finished."""

from __future__ import annotations

import pytest

from gridsearch.settings import OBJECTIVES
from trainables import names


@pytest.mark.parametrize(
    "metric", ["dev/r10_mean", names.BEST_SEMANTIC, "dev/sickr_cosine_pearson"]
)
def test_dev_metrics_are_selectable(metric: str) -> None:
    assert names.selectable(metric) == metric


@pytest.mark.parametrize(
    "metric", ["test/r10_mean", "test/semantic_best", names.FINISHED, "ensemble/semantic", "epoch"]
)
def test_test_and_ensemble_metrics_are_not(metric: str) -> None:
    with pytest.raises(ValueError, match="cannot be selected on: only dev/ metrics"):
        names.selectable(metric)


def test_every_search_objective_is_a_dev_metric() -> None:
    for metrics, _ in OBJECTIVES.values():
        for metric in metrics if isinstance(metrics, list) else [metrics]:
            assert metric.startswith("dev/") and metric.endswith("_best")


def test_finished_means_the_ensemble_was_evaluated() -> None:
    assert names.is_finished({names.FINISHED: 10.0})
    assert not names.is_finished({"test/r10_mean": 10.0, "dev/r10_mean": 10.0})


def test_the_two_semantic_scores_are_documented_apart() -> None:
    assert names.DEV_SEMANTIC_PARTS == ("stsb_cosine_pearson", "sickr_cosine_pearson")
    assert "semantic" in names.DEV_SEMANTIC and "semantic" in names.SEMANTIC
    assert "(sts12_16_pearson + sickr_pearson) / 2" in (names.__doc__ or "")
