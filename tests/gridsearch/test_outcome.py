"""How a trial ended: decided once, from its last report."""

from __future__ import annotations

import pytest

from gridsearch._outcome import Outcome, classify
from trainables import names

FINISHED = {names.FINISHED: 50.0, "epoch": 2.0}
MIDWAY = {names.PRIMARY_RETRIEVAL: 30.0, "test/r10_mean": 20.0, "epoch": 1.0}


@pytest.mark.parametrize(
    ("metrics", "error", "complete", "outcome"),
    [
        (FINISHED, False, True, Outcome.FINISHED),
        (FINISHED, False, False, Outcome.FINISHED),
        (MIDWAY, False, True, Outcome.STOPPED_EARLY),  # the scheduler stopped it
        (MIDWAY, False, False, Outcome.SEARCH_ENDED),  # the search stopped first
        (MIDWAY, True, True, Outcome.FAILED),
        (FINISHED, True, False, Outcome.FAILED),  # an error wins
        ({}, False, False, Outcome.SEARCH_ENDED),
    ],
)
def test_classify(metrics: dict, error: bool, complete: bool, outcome: Outcome) -> None:
    assert classify(metrics, error=error, search_complete=complete) is outcome


def test_statuses_and_values() -> None:
    assert [o.value for o in Outcome] == [
        "finished", "stopped_early", "failed", "search_ended", "abandoned",
    ]  # fmt: skip
    # stopped early is no failure: FINISHED; KILLED only for trials cut short
    assert {o.status for o in (Outcome.FINISHED, Outcome.STOPPED_EARLY)} == {"FINISHED"}
    assert Outcome.FAILED.status == "FAILED"
    assert {o.status for o in (Outcome.SEARCH_ENDED, Outcome.ABANDONED)} == {"KILLED"}
    assert Outcome("stopped_early") == "stopped_early"  # reads back from an MLflow tag
