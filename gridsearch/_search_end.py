"""A search's end: what Tune's results say of every trial (``TrialOutcome``), the
records completed in MLflow, the best models registered and the parent run closed, as
the ``SearchResult`` that ``gridsearch.driver.run_search`` returns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gridsearch import _extend, _optuna
from gridsearch._interrupt import Interruption
from gridsearch._members import MemberResults, tune_trial_of
from gridsearch._outcome import Failures, Outcome, classify, failures_of
from gridsearch._voice import voice_of
from gridsearch.registry import register_best
from gridsearch.settings import SearchError, SearchSettings
from gridsearch.summary import TrialOutcome, format_summary
from gridsearch.tracking import close_parent

if TYPE_CHECKING:
    from gridsearch._search_setup import SearchRun

__all__ = ["SearchResult", "finish", "stopped"]


@dataclass(frozen=True)
class SearchResult:
    settings: SearchSettings
    outcomes: list[TrialOutcome]  # one per trial Tune knows
    summary: str  # counts, the best trial per objective (and the Pareto front for both)
    unfinished: int  # trials left to run: a --resume continues
    outcome: str  # the parent run's: finished, failed or interrupted
    dashboard: str | None  # the Ray dashboard's URL, live while the search ran
    # why trials were left: "SIGINT", "SIGTERM", "time budget", or "no space left on ..."
    stopped_by: str | None = None
    # False when it stopped before Tune saved anything: the same command starts it again
    resumable: bool = True

    @property
    def interrupted(self) -> bool:
        """Stopped by a signal or a full disk (not its time budget): resume it."""
        return self.stopped_by is not None and self.stopped_by != "time budget"


def finish(
    run: SearchRun,
    results: Any,
    dashboard: str | None,
    elapsed_s: float,
    interruption: Interruption,
) -> SearchResult:
    """After Tune: every epoch Tune holds is in MLflow, no run is left RUNNING, no
    Optuna trial is left RUNNING once the search is complete; the best models
    registered (unless it was interrupted); the parent closed. An interrupted search
    (a signal, a full disk) is complete in nothing: Tune ends its trials when it stops
    (TERMINATED, like trials that ran out), so only those it ended before count."""
    run.results = results
    results = MemberResults(results)  # every trial's members, each as a trial
    stopped_by = interruption.reason
    interrupted = stopped_by is not None
    if interrupted:
        ended = [r for r in results if r.error is not None or tune_trial_of(r) in run.ended.ids]
        unfinished = max(run.num_samples - len(ended), 0)
    else:
        unfinished = max(run.num_samples - results.num_terminated - results.num_errors, 0)
        if unfinished:
            budget = run.settings.time_budget_s
            stopped_by = "time budget" if budget and elapsed_s >= budget else "Tune stopped it"
    complete = unfinished == 0 and not interrupted
    with voice_of(run.write).phase("recording the trials' last results in MLflow"):
        _flush(run)
        reconciled = run.tracker.reconcile(results, complete=complete)
    if reconciled:
        run.write(
            f"recorded from Tune's results what MLflow lacked: {reconciled.epochs} "
            f"epoch(s), {reconciled.closed} run(s) closed, {reconciled.abandoned} run(s) "
            "of trials lost with a stopped driver marked abandoned"
        )
    if (repeats := _optuna.repeats_line(run.searcher)) is not None:
        run.write(repeats)
    if complete:
        _optuna.close_leftovers(run.settings.experiment, run.settings.optuna_storage)
    outcomes = _outcomes(results, run.shown, complete, run.ended.ids, _failures(run))
    if not interrupted:  # before the parent is closed: a signal now leaves it open
        voice = voice_of(run.write)
        with voice.phase("registering the best models in MLflow's Model Registry", "register"):
            register_best(
                outcomes,
                tracking_uri=run.settings.tracking_uri,
                experiment=run.settings.experiment,
                space=run.space.name,
                objective=run.settings.objective,
                write=voice,
                smoke_test=run.settings.smoke_test,
            )
    return _closed(run, outcomes, unfinished, elapsed_s, dashboard, stopped_by, interrupted)


def stopped(
    run: SearchRun, dashboard: str | None, elapsed_s: float, interruption: Interruption
) -> SearchResult:
    """A signal stopped the driver where it was (before Tune ran, a second signal
    while Tune stopped, or after it returned): every run of the search still open is
    closed ``search_ended``, the parent ``interrupted`` (KILLED); the outcomes are
    Tune's results when it returned, else what its saved experiment holds."""
    stopped_by = interruption.reason or "SIGINT"
    results = run.results
    if results is None:
        results = _extend.saved_results(run.settings)
    results = MemberResults(results)  # every trial's members, each as a trial
    outcomes = _outcomes(results, run.shown, False, run.ended.ids, _failures(run))
    done = sum(o.status in _ENDED for o in outcomes)
    unfinished = max(run.num_samples - done, 0)
    with voice_of(run.write).phase("recording the trials' last results in MLflow"):
        run.tracker.flush(wait_s=min(run.settings.tracking_wait_s, 30.0))
        run.tracker.runs.end_running(Outcome.SEARCH_ENDED)
    resumable = _extend.resumable(run.settings)
    return _closed(run, outcomes, unfinished, elapsed_s, dashboard, stopped_by, True, resumable)


def _closed(
    run: SearchRun,
    outcomes: list[TrialOutcome],
    unfinished: int,
    elapsed_s: float,
    dashboard: str | None,
    stopped_by: str | None,
    interrupted: bool,
    resumable: bool = True,
) -> SearchResult:
    """The parent run closed with the ``outcomes`` and their summary (what was retried
    said in it, on the trials' runs and on the parent): the result."""
    run.tracker.mark_failures(outcomes)  # queued: a store that is away waited for already
    # the baselines, if computed beside the trials: waited for unless a signal stopped it
    baselines = run.log_baselines(wait=not interrupted)
    summary = format_summary(outcomes, run.settings.objective, baselines)
    tracking = run.tracker.queue.said()
    if tracking is not None:
        summary += f"\n{tracking}"
    outcome = close_parent(
        run.client, run.parent, outcomes, summary, unfinished, elapsed_s, interrupted, tracking
    )
    return SearchResult(
        run.settings, outcomes, summary, unfinished, outcome, dashboard, stopped_by, resumable
    )


def _flush(run: SearchRun) -> None:
    settings = run.settings
    if run.tracker.pending and not run.tracker.flush():
        queue = run.tracker.queue
        if queue.disk_full is not None:
            raise SearchError(
                f"{queue.why_pending(settings.tracking_wait_s)}: {queue.pending} "
                "record(s) are not in MLflow yet. No training is lost: Tune keeps every "
                f"result under {settings.experiment_path}. Free some space, then run "
                f"`{settings.resume_command}` to record them."
            )
        raise SearchError(
            f"the MLflow tracking store at {settings.tracking_uri} did not come back within "
            f"--tracking-wait {settings.tracking_wait_s:g} s; {run.tracker.pending} "
            "record(s) are not in MLflow yet. No training is lost: Tune keeps every result "
            f"under {settings.experiment_path}. Once the store answers, run "
            f"`{settings.resume_command}` to record them."
        )


# the outcomes of trials that need nothing more (a --resume leaves them as they are)
_ENDED = (Outcome.FINISHED.value, Outcome.STOPPED_EARLY.value, Outcome.FAILED.value)


def _failures(run: SearchRun) -> dict[str, Failures]:
    """Each Tune trial's failures (``_outcome.failures_of``), from the trials Tune
    returned, else from its saved experiment."""
    analysis = getattr(run.results, "_experiment_analysis", None)
    trials = getattr(analysis, "trials", None)
    if trials is None:
        trials = _extend.saved_trials(run.settings)
    return {str(trial.trial_id): failures_of(trial) for trial in trials}


def _outcomes(
    results: Any,
    searched: Sequence[str],
    complete: bool,
    ended: set[str] | frozenset[str],
    failures: Mapping[str, Failures] | None = None,
) -> list[TrialOutcome]:
    """One per trial of Tune's ``results``. ``complete``: no trial is left to run;
    ``ended``: trials Tune completed (a trial without its ensemble among them was
    stopped early, not by the search's end; a member of a fused trial goes by its
    trial's); ``failures``: by Tune trial (a member has its trial's)."""
    failures = failures or {}
    outcomes = []
    for result in results:
        metrics = {k: v for k, v in (result.metrics or {}).items() if isinstance(v, (int, float))}
        trial_id = str((result.metrics or {}).get("trial_id", "?"))
        status = classify(
            metrics,
            error=result.error is not None,
            search_complete=complete or tune_trial_of(result) in ended,
        )
        config = result.config or {}
        shown = {k: config[k] for k in searched if k in config}
        failed = failures.get(tune_trial_of(result), Failures())
        outcomes.append(TrialOutcome(trial_id, shown, metrics, status.value, failed))
    return outcomes
