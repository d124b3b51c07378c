"""Make MLflow agree with Tune's experiment, the record of truth, at the end of every
search and every ``--resume``: log every reported epoch MLflow lacks (the first report of
an epoch wins, as during the search), close the runs of trials that ended while nobody
could record it (a killed driver, a tracking server that was away; a run closed as cut
short by a stop whose trial had ended is closed again as it ended), and mark runs whose
trial Tune no longer knows as abandoned."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gridsearch._outcome import Outcome, classify
from gridsearch.tracking._runs import TrialRuns
from trainables import names

__all__ = ["ReconcileReport", "epoch_metrics", "reconcile"]

LOGGED_PREFIXES = ("dev/", "test/", "train/", "time/", f"{names.ENSEMBLE}/")


@dataclass
class ReconcileReport:
    epochs: int = 0  # epochs MLflow lacked (or their test battery, delivered late)
    closed: int = 0  # runs closed after the fact
    abandoned: int = 0  # runs of trials Tune no longer knows

    def __bool__(self) -> bool:
        return bool(self.epochs or self.closed or self.abandoned)


def epoch_metrics(result: Mapping[str, Any], *, from_table: bool = False) -> dict[str, float]:
    """The metrics of one reported epoch that MLflow keeps. ``from_table``: a row of
    Tune's table, where a metric the epoch did not report reads back as NaN."""
    return {
        k: float(v)
        for k, v in result.items()
        if k.startswith(LOGGED_PREFIXES)
        and isinstance(v, (int, float))
        and not isinstance(v, bool)
        and not (from_table and v != v)
    }


def reconcile(runs: TrialRuns, results: Iterable[Any], *, complete: bool) -> ReconcileReport:
    """``results``: Tune's ``Result`` per trial. ``complete``: no trial is left to run,
    so a trial that ended without its ensemble was stopped early."""
    report = ReconcileReport()
    known: set[str] = set()
    for result in results:
        trial_id = (result.metrics or {}).get("trial_id")
        if not trial_id:
            continue
        known.add(trial_id)
        config = dict(result.config or {})
        report.epochs += _missing_epochs(runs, trial_id, config, result.metrics_dataframe)
        report.epochs += _missing_last(runs, trial_id, config, result.metrics)
        error = result.error is not None
        outcome = classify(result.metrics or {}, error=error, search_complete=complete)
        run_id = runs.run_of(trial_id, config)
        if runs.is_closed(run_id):
            if outcome is Outcome.SEARCH_ENDED or runs.ended_as(run_id) != Outcome.SEARCH_ENDED:
                continue
            # closed as cut short by a stop, though it had ended (a hard stop's trial
            # kept finished by the resume, _settle.settle_finished): closed as it ended
            runs.reopen(trial_id, config)
        runs.close(
            trial_id, config, outcome, result.checkpoint, str(result.error) if error else None
        )
        report.closed += 1
    report.abandoned = runs.abandon_unknown(known)
    return report


def _missing_last(
    runs: TrialRuns, trial_id: str, config: dict[str, Any], last: Mapping[str, Any] | None
) -> int:
    """The trial's last result where its table ends before it (a stop that came as the
    trial ended: Tune kept the result in its state, not in the trial's ``result.json``)."""
    epoch = (last or {}).get("epoch")
    if not isinstance(epoch, (int, float)) or isinstance(epoch, bool) or epoch != epoch:
        return 0
    assert last is not None
    logged = int(runs.log_epoch(trial_id, config, int(epoch), epoch_metrics(last)))
    late = names.late_metrics(last)  # an earlier epoch's test battery, come with it
    return logged + int(late is not None and runs.log_late(trial_id, config, *late))


def _missing_epochs(runs: TrialRuns, trial_id: str, config: dict[str, Any], frame: Any) -> int:
    if frame is None or "epoch" not in frame:
        return 0
    logged = 0
    for row in frame.to_dict("records"):
        epoch = row.get("epoch")
        if epoch is None or epoch != epoch:
            continue
        if runs.log_epoch(trial_id, config, int(epoch), epoch_metrics(row, from_table=True)):
            logged += 1
        late = names.late_metrics(row, from_table=True)  # an earlier epoch's test battery
        if late is not None and runs.log_late(trial_id, config, *late):
            logged += 1
    return logged
