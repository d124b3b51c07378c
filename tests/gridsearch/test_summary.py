"""The computed parts of the search's output: Pareto fronts, best trials, the summary."""

from __future__ import annotations

import dataclasses
import math

from gridsearch._outcome import Failures, last_failure
from gridsearch.summary import TrialOutcome, best_trial, format_summary, pareto_front
from trainables import names


def test_pareto_front_of_known_points() -> None:
    points = [(50, 0.5), (60, 0.4), (40, 0.6), (45, 0.45), (60, 0.3), (math.nan, 0.9), (30, 0.6)]
    assert pareto_front(points) == [1, 0, 2]


def test_pareto_front_keeps_ties() -> None:
    assert pareto_front([(1, 1), (1, 1), (0, 0)]) == [0, 1]


def _outcome(
    tid: str, r: float, s: float, status: str = "finished", ensemble: tuple[float, float] = ()
) -> TrialOutcome:
    metrics = {names.BEST_RETRIEVAL: r, names.BEST_SEMANTIC: s}
    if ensemble:  # its snapshot ensemble's test R@10 mean and semantic score
        metrics[names.FINISHED] = ensemble[0]
        metrics[names.key(names.ENSEMBLE, "semantic")] = ensemble[1]
    return TrialOutcome(tid, {"margin": 0.2}, metrics, status)


def test_a_tie_goes_to_the_other_objective_then_the_trial_id_in_any_order() -> None:
    """The best trial does not depend on the order the outcomes come in: a search's end
    and MLflow list them differently, and small dev splits tie often."""
    import itertools

    outcomes = [
        _outcome("d", 60, 0.40),
        _outcome("b", 60, 0.45),  # ties d on retrieval, better semantic
        _outcome("a", 55, 0.45),  # ties b on semantic, worse retrieval
        _outcome("c", 60, 0.45),  # ties b on both: the smaller id wins
        _outcome("e", 60, math.nan),  # no semantic score: loses every tie
    ]
    for order in itertools.permutations(outcomes):
        assert best_trial(order, names.BEST_RETRIEVAL).trial_id == "b"
        assert best_trial(order, names.BEST_SEMANTIC).trial_id == "b"
    assert best_trial(outcomes[::4], names.BEST_RETRIEVAL).trial_id == "d"


def test_best_trials_and_summary() -> None:
    outcomes = [_outcome("a", 50, 0.5), _outcome("b", 60, 0.4), _outcome("c", 40, 0.7, "failed")]
    assert best_trial(outcomes, names.BEST_RETRIEVAL).trial_id == "b"
    assert best_trial(outcomes, names.BEST_SEMANTIC).trial_id == "c"
    text = format_summary(outcomes, "both")
    assert text.splitlines()[0] == "3 trials: 1 failed, 2 finished"
    assert "Pareto front" in text and "  b:" in text and "  a:" in text and "  c:" in text
    assert format_summary(outcomes[:1], "retrieval").splitlines()[0] == "1 trial: 1 finished"


def test_a_retried_trial_is_counted_and_named_apart_from_plain_ones() -> None:
    """A trial that failed and was run again is never counted as plainly finished: the
    count says "after a retry", and a line names it, how often it failed and why."""
    once = Failures(1, "AttributeError: module 'x' has no attribute 'gru_forward'")
    outcomes = [
        _outcome("a", 50, 0.5),
        dataclasses.replace(_outcome("b", 60, 0.4), failures=once),
        dataclasses.replace(_outcome("c", 40, 0.7, "failed"), failures=Failures(2, "boom")),
        dataclasses.replace(_outcome("d", 30, 0.1, "failed"), failures=Failures(1, "once")),
    ]
    lines = format_summary(outcomes, "retrieval").splitlines()
    assert lines[:4] == [
        "4 trials: 1 failed, 1 failed after a retry, 1 finished, 1 finished after a retry",
        f"  retried b: failed once ({once.last}), then finished",
        "  retried c: failed 2 times (boom), and then given up (failed)",
        lines[3],
    ]
    assert not lines[3].startswith("  retried")  # d failed at its first try: no retry
    assert [o.retried for o in outcomes] == [False, True, True, False]


def test_the_cause_of_a_trials_last_failure_is_read_from_tunes_error_file() -> None:
    text = (
        "Failure # 1 (occurred at 2026-01-02_10-00-00)\n"
        'ray::ImplicitFunc.train() (pid=1, ip=1.2.3.4)\n  File "x.py", line 3\n'
        "ValueError: the loss became nan\n"
        "Failure # 2 (occurred at 2026-01-02_10-00-09)\n"
        "ray::ImplicitFunc.train() (pid=2, ip=1.2.3.4)\n"
        "AttributeError: module 'grounded_packed_rnn_x' has no attribute 'gru_forward'\n"
    )
    assert last_failure(text) == (
        "AttributeError: module 'grounded_packed_rnn_x' has no attribute 'gru_forward'"
    )
    assert last_failure(text.split("Failure # 2")[0]) == "ValueError: the loss became nan"
    assert last_failure("") == "" and last_failure("x" * 500) == "x" * 200


def test_the_summary_holds_the_best_trials_against_each_baseline() -> None:
    test_r10, test_sem = names.key(names.TEST, "r10_mean"), names.key(names.TEST, "semantic")
    a = _outcome("a", 60, 0.5, ensemble=(58.0, 0.72))
    b = _outcome("b", 50, 0.6, ensemble=(40.0, 0.80))
    baselines = {
        "chance": {test_r10: 5.0},
        "ngram_ridge": {test_r10: 57.0, test_sem: 0.818},
        "char_ngrams": {test_sem: 0.714, test_r10: math.nan},
    }
    lines = format_summary([a, b], "retrieval", baselines).splitlines()[-3:]
    assert lines == [
        "baselines (test; python -m trainables.baselines): char n-gram ridge R@10 mean 57.0, "
        "semantic 0.818; char n-gram cosine semantic 0.714; chance R@10 mean 5.0",
        "  best retrieval trial a: test R@10 mean 58.0, above char n-gram ridge (57.0)",
        "  best semantic trial b: test semantic 0.800, BELOW char n-gram ridge (0.818), above "
        "char n-gram cosine (0.714)",
    ]
    unfinished = _outcome("c", 70, 0.7, "stopped_early")  # no ensemble: nothing to hold
    assert (
        format_summary([unfinished], "both", baselines)
        .splitlines()[-1]
        .startswith("baselines (test")
    )
    assert "baselines" not in format_summary([a], "retrieval", None)
