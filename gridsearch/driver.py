"""The search: data, MLflow, Ray, Optuna and Tune wired together once.

``run_search(settings)`` runs a search (or continues one: ``settings.resume``) and
returns what it found as a ``SearchResult``. It prints nothing: every line a user should
see goes to ``write`` (``gridsearch.run`` passes ``print``).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

import ray
from ray import tune
from ray.tune import Callback

from gridsearch import _damage, _extend, _optuna
from gridsearch._inputs import (
    check_experiment_path,
    load_baselines,
    load_benchmark,
    load_data,
    prepare_runs_dir,
    tracking_client,
)
from gridsearch._interrupt import DiskGuard, Interruption, is_disk_full
from gridsearch._lock import ExperimentLock, LockHeld, setup_lock
from gridsearch._outcome import Outcome, classify
from gridsearch._parent import close_parent, parent_params
from gridsearch._reconcile import ReconcileReport
from gridsearch._scheduler import asha_rungs, cycle_epochs, describe_rungs, make_scheduler
from gridsearch._scheduler_choice import FIFO_BELOW_EPOCHS, resolve_scheduler
from gridsearch._store import ensure_experiment, start_parent_run
from gridsearch.cluster import (
    Resources,
    fixed_settings,
    resources_for,
    start_ray,
    token_auth_enabled,
)
from gridsearch.progress import ProgressPrinter, progress_dir, shown_keys
from gridsearch.registry import register_best
from gridsearch.settings import SearchError, SearchSettings
from gridsearch.spaces import SearchSpace, load_space
from gridsearch.summary import TrialOutcome, format_summary
from gridsearch.tracking import TrialTracker
from storage.senteval import SemanticBenchmark
from trainables.baselines import BASELINES_FILE, json_text
from trainables.data import TrainingData
from trainables.tune import grounded_trainable

__all__ = ["SearchResult", "run_search"]

Write = Callable[[str], None]


def _silent(line: str) -> None:
    """The default ``write``: a library call prints nothing."""


@dataclass(frozen=True)
class SearchResult:
    settings: SearchSettings
    outcomes: list[TrialOutcome]  # one per trial Tune knows
    summary: str  # counts, the best trial per objective (and the Pareto front for both)
    unfinished: int  # trials left to run: a --resume continues
    outcome: str  # the parent run's: finished, failed or interrupted
    elapsed_s: float
    dashboard: str | None  # the Ray dashboard's URL, live while the search ran
    reconciled: ReconcileReport  # what MLflow lacked and was written from Tune's results
    # why trials were left: "SIGINT", "SIGTERM", "time budget", or "no space left on ..."
    stopped_by: str | None = None
    # False when it stopped before Tune saved anything: the same command starts it again
    resumable: bool = True

    @property
    def interrupted(self) -> bool:
        """Stopped by a signal or a full disk (not its time budget): resume it."""
        return self.stopped_by is not None and self.stopped_by != "time budget"


def run_search(
    settings: SearchSettings, *, write: Write = _silent, space: SearchSpace | None = None
) -> SearchResult:
    """Run (or continue) the search ``settings`` describe (``space``: its space, when the
    caller loaded it already). Bad input or an unusable environment raises ``SearchError``
    before anything is written; another driver running the same experiment, too."""
    started = time.perf_counter()
    _optuna.quiet()
    space = space or load_space(settings)
    check_experiment_path(settings)
    prepare_runs_dir(settings)  # a runs directory that takes no files fails first
    if settings.resume:  # every file a resume writes to, before it writes any
        _extend.check_writable(settings)
    lock = ExperimentLock(
        settings.layout.lock(settings.experiment), f"--experiment {settings.experiment}"
    )
    try:
        with lock:  # before the experiment is read: another driver may be writing it
            check_experiment_path(settings)  # again, now that no other driver can start it
            if settings.moved_from is not None:  # a copied or moved runs directory
                write(_extend.relocate(settings))
            if settings.resume:  # nothing left to run, or fewer trials than recorded
                _damage.check_resume_state(settings)  # a damaged state file: one line, before Ray
                _extend.check_resume(settings)
            # before Ray: forked workers must not read the store again
            store, senteval, data = load_data(settings, write)
            benchmark = load_benchmark(senteval, settings.objective)
            with setup_lock(settings.layout.setup_lock):
                client = tracking_client(settings)
            baselines = load_baselines(settings, store, senteval, data, write)
            inputs = _Inputs(space, client, store, senteval, data, benchmark, baselines)
            return _with_ray(settings, inputs, write, started)
    except LockHeld as err:
        raise SearchError(str(err)) from None


@dataclass(frozen=True)
class _Inputs:
    space: SearchSpace
    client: Any
    store: str
    senteval: str | None
    data: TrainingData | str
    benchmark: SemanticBenchmark | None
    baselines: dict[str, dict[str, float]] | None  # trainables.baselines, by baseline


class Signals:
    """SIGINT and SIGTERM while a search runs, handled one way (``with Signals(...)``).

    While Tune runs (``tune_running``), the first signal is Tune's graceful stop
    (``Interruption.request``: Tune ends the trials, saves the experiment and returns);
    Tune's own SIGINT handler is kept out (``TUNE_DISABLE_SIGINT_HANDLER``), so that
    Ctrl+C is recorded as the reason like SIGTERM. Any other signal (before Tune runs,
    after it returned, or a second one while it stops) stops the driver where it is
    (``KeyboardInterrupt``); the driver then closes what it opened as interrupted.
    Once ``done`` (everything recorded), signals are ignored: the driver is exiting."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, interruption: Interruption) -> None:
        self.interruption = interruption
        self.tune_running = False
        self.done = False
        self.received = 0
        self._previous: dict[int, Any] = {}
        self._env: str | None = None

    def install(self) -> None:
        """(Again) make this the handler: ``ray.init`` sets its own for SIGTERM."""
        for signum in self.SIGNALS:
            previous = signal.signal(signum, self._on_signal)
            self._previous.setdefault(signum, previous)

    def __enter__(self) -> Signals:
        self._env = os.environ.get(_TUNE_SIGINT)
        os.environ[_TUNE_SIGINT] = "1"
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        if self._env is None:
            os.environ.pop(_TUNE_SIGINT, None)
        else:
            os.environ[_TUNE_SIGINT] = self._env

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.done:
            return
        name = signal.Signals(signum).name
        self.received += 1
        if self.tune_running and self.received == 1:
            self.interruption.request(name)  # Tune's graceful stop
            return
        if self.interruption.reason is None:
            self.interruption.reason = name
        raise KeyboardInterrupt(name)


_TUNE_SIGINT = "TUNE_DISABLE_SIGINT_HANDLER"  # read by tune.run when it starts


def _with_ray(
    settings: SearchSettings, inputs: _Inputs, write: Write, started: float
) -> SearchResult:
    interruption = Interruption()
    with Signals(interruption) as signals:
        dashboard = start_ray(settings)
        signals.install()  # ray.init set its own SIGTERM handler
        run: _Run | None = None
        try:
            if dashboard:
                write(f"Ray dashboard: {dashboard}")
                if token_auth_enabled():
                    write(
                        "  token authentication is on: `ray get-auth-token` prints the token "
                        "to paste into the dashboard's login"
                    )
            resources = resources_for(settings)
            fixed, note = fixed_settings(settings, resources)
            if note:
                write(note)
            rungs = stopping_epochs(settings, inputs.space, fixed)
            trainable = _trainable(
                settings, inputs.space, resources, inputs.data, inputs.benchmark, rungs
            )
            run = _Run(settings, inputs, resources, fixed, write)
            tuner = run.tuner(trainable, interruption)
            signals.tune_running = True
            try:
                results = _fit(tuner, settings)
            finally:
                signals.tune_running = False
            result = run.finish(results, dashboard, time.perf_counter() - started, interruption)
        except KeyboardInterrupt:
            signals.done = True  # closing what was opened: not to be cut short again
            if run is None:  # nothing recorded yet: run.py says how to start again
                raise
            result = run.stopped(dashboard, time.perf_counter() - started, interruption)
        finally:
            signals.done = True  # recorded (or not started): a late signal changes nothing
            if not settings.address:
                ray.shutdown()
    return result


def _fit(tuner: tune.Tuner, settings: SearchSettings) -> Any:
    """``tuner.fit()``; a disk that filled anyway (ENOSPC in Tune's own writes) is a
    SearchError that says how to continue."""
    try:
        return tuner.fit()
    except Exception as err:
        if not is_disk_full(err):
            raise
        raise SearchError(
            f"no space left on a device the search writes to ({_last_line(err)}); free some "
            f"space and continue with `{settings.resume_command}` (Tune keeps every finished "
            f"epoch under {settings.experiment_path}, --resume records what MLflow lacks)"
        ) from None


def _last_line(err: BaseException) -> str:
    """The last line of an error's message (a Ray error ends with its cause), or its type."""
    lines = str(err).strip().splitlines()
    return lines[-1][:200] if lines else type(err).__name__


class _Run:
    """One search's MLflow records and Tune experiment, from start to finish."""

    def __init__(
        self,
        settings: SearchSettings,
        inputs: _Inputs,
        resources: Resources,
        fixed: dict[str, Any],
        write: Write,
    ) -> None:
        space = inputs.space
        self.auto_fifo = False  # "auto" chose no early stopping (said at the start)
        if not settings.resume:  # a resumed search keeps its own scheduler
            scheduler = resolve_scheduler(settings.scheduler, settings.objective, fixed["epochs"])
            self.auto_fifo = settings.scheduler == "auto" and scheduler == "fifo"
            settings = replace(settings, scheduler=scheduler)
        self.settings, self.space, self.client, self.write = settings, space, inputs.client, write
        if settings.optuna_storage.startswith("sqlite:///"):  # the study's folder
            study = Path(settings.optuna_storage.removeprefix("sqlite:///"))
            study.parent.mkdir(parents=True, exist_ok=True)
        default = 2 if settings.smoke_test else (4 if resources.gpu == 0 else 8)
        self.num_samples = settings.num_samples or space.grid_size() or default
        sampler, self.sampler_name = _optuna.make_sampler(
            space, settings.seed, settings.objective == "both", self.num_samples,
            settings.sampler,
        )  # fmt: skip
        if settings.warm_start and not settings.resume:
            self._warm_start(fixed)
        self.searcher = _optuna.searcher(
            space,
            fixed,
            sampler,
            metric=settings.metric,
            mode=settings.mode,
            study=settings.experiment,
            storage_url=settings.optuna_storage,
            max_concurrent=resources.concurrent,
        )
        self.shown = shown_keys(space)  # what a trial tried, as the summary names it
        self.epochs = int(fixed["epochs"])
        self.cycle = cycle_epochs(space.fixed, fixed)
        self.baselines = inputs.baselines
        self.ended = _Ended()  # trials Tune ended (ran out or stopped by the scheduler)
        self.results: Any = None  # Tune's, once it returned
        self._start_tracking(resources, fixed, inputs.store, inputs.senteval)

    def _warm_start(self, fixed: dict[str, Any]) -> None:
        """Start the study from the ended trials of the earlier search --warm-start."""
        settings, source = self.settings, str(self.settings.warm_start)
        try:
            record = json.loads(settings.layout.record(source).read_text(encoding="utf-8"))
            source_storage = str(record["optuna_storage"])
            copied, left = _optuna.warm_start(
                source,
                source_storage,
                study=settings.experiment,
                storage_url=settings.optuna_storage,
                modes=_as_list(settings.mode),
                space=self.space,
                fixed=fixed,
            )
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise SearchError(f"--warm-start {source}: cannot read its study ({err})") from None
        self.write(
            f"warm start: {copied} ended trial(s) of {source!r} start the study"
            + (f" ({left} left out: another space or objective)" if left else "")
        )

    def _start_tracking(
        self, resources: Resources, fixed: dict[str, Any], store: str, senteval: str | None
    ) -> None:
        """The experiment and the parent run, before any trial; the trials' tracker."""
        settings, space, client = self.settings, self.space, self.client
        experiment_id = ensure_experiment(client, settings.experiment, settings.layout.mlartifacts)
        tags = {"space": space.name, "objective": settings.objective}
        params = parent_params(
            settings, space, fixed, resources, self.num_samples, self.sampler_name, store, senteval
        )
        artifacts = {"space.json": space.to_dict(), "fixed.json": fixed}
        if self.baselines is not None:  # the report draws them (strict JSON: NaN as null)
            artifacts[BASELINES_FILE] = json.loads(json_text(self.baselines))
        self.parent = start_parent_run(
            client, experiment_id, settings.experiment, params, tags, artifacts
        )
        self.tracker = TrialTracker(
            settings.tracking_uri,
            experiment_id,
            self.parent,
            tags,
            wait_s=settings.tracking_wait_s,
        )

    def tuner(self, trainable: Any, interruption: Interruption) -> tune.Tuner:
        settings = self.settings
        guard = DiskGuard(
            _local_paths(settings), int(settings.min_free_disk_mb * 2**20), interruption
        )
        if (low := guard.low()) is not None:
            raise SearchError(
                f"no space left on {low[0]}: {low[1] / 2**20:.0f} MiB free, the search needs "
                f"{settings.min_free_disk_mb:g} MiB (--min-free-disk)"
            )
        self.tracker.interruption = interruption
        callbacks = [
            self.tracker,
            ProgressPrinter(
                self.space,
                self.num_samples,
                self.epochs,
                settings.metric,
                self.write,
                progress_dir=progress_dir(settings.layout.root, settings.experiment),
            ),
            guard,
            self.ended,
        ]
        if settings.resume:  # the experiment keeps its own scheduler and searcher
            self.ended.ids |= _extend.ended_trials(settings)  # before this driver
            restored = tune.Tuner.restore(
                settings.experiment_path,
                trainable=trainable,
                resume_unfinished=True,
                resume_errored=True,
            )
            _extend.use_callbacks(restored, callbacks)
            if settings.num_samples is not None:  # the record's, or a larger --num-samples
                _extend.extend(restored, settings.num_samples)
                settings.save_record()  # the record keeps the number of trials
                self.write(f"resuming {settings.experiment!r} up to {self.num_samples} trials")
            return restored
        if settings.scheduler == "asha":
            pareto = settings.objective == "both"
            self.write(describe_rungs(self.epochs, self.cycle, pareto))
        elif self.auto_fifo:
            self.write(
                f"no early stopping: every trial trains its {self.epochs} epochs (--scheduler "
                f"auto stops trials early from {FIFO_BELOW_EPOCHS} epochs on; --scheduler asha "
                "stops them at cycle ends anyway)"
            )
        seeds = settings.seeds_per_config
        self.write(
            f"searching {self.space.name!r} ({self.num_samples} trials, {self.sampler_name}, "
            f"{settings.scheduler}, objective {settings.objective}"
            + (f", each trial the mean of {seeds} seeds" if seeds > 1 else "")
            + f") as {settings.experiment!r}"
        )
        settings.save_record(num_samples=self.num_samples)
        return tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(
                search_alg=self.searcher,
                scheduler=make_scheduler(
                    settings.scheduler, self.epochs, self.cycle, settings.metric, settings.mode
                ),
                num_samples=self.num_samples,
                metric=_first(settings.metric),
                mode=_first(settings.mode),
                time_budget_s=settings.time_budget_s,
                # A finished trial's worker process takes the next trial: no new process,
                # no second import of torch, and the data already in its memory.
                reuse_actors=True,
            ),
            run_config=tune.RunConfig(
                name=settings.experiment,
                storage_path=settings.storage_path,
                callbacks=callbacks,
                verbose=0,
                failure_config=tune.FailureConfig(max_failures=settings.max_failures),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
            ),
        )

    def finish(
        self, results: Any, dashboard: str | None, elapsed_s: float, interruption: Interruption
    ) -> SearchResult:
        """After Tune: every epoch Tune holds is in MLflow, no run is left RUNNING, no
        Optuna trial is left RUNNING once the search is complete; the best models
        registered (unless it was interrupted); the parent closed. An interrupted search
        (a signal, a full disk) is complete in nothing: Tune ends its trials when it stops
        (TERMINATED, like trials that ran out), so only those it ended before count."""
        self.results = results
        stopped_by = interruption.reason
        interrupted = stopped_by is not None
        if interrupted:
            ended = [r for r in results if r.error is not None or _trial_id(r) in self.ended.ids]
            unfinished = max(self.num_samples - len(ended), 0)
        else:
            unfinished = max(self.num_samples - results.num_terminated - results.num_errors, 0)
            if unfinished:
                budget = self.settings.time_budget_s
                stopped_by = "time budget" if budget and elapsed_s >= budget else "Tune stopped it"
        complete = unfinished == 0 and not interrupted
        self._flush()
        reconciled = self.tracker.reconcile(results, complete=complete)
        if reconciled:
            self.write(
                f"recorded from Tune's results what MLflow lacked: {reconciled.epochs} "
                f"epoch(s), {reconciled.closed} run(s) closed, {reconciled.abandoned} run(s) "
                "of trials lost with a stopped driver marked abandoned"
            )
        if (repeats := _optuna.repeats_line(self.searcher)) is not None:
            self.write(repeats)
        if complete:
            _optuna.close_leftovers(self.settings.experiment, self.settings.optuna_storage)
        outcomes = _outcomes(results, self.shown, complete, self.ended.ids)
        summary = format_summary(outcomes, self.settings.objective, self.baselines)
        if not interrupted:  # before the parent is closed: a signal now leaves it open
            register_best(
                outcomes,
                tracking_uri=self.settings.tracking_uri,
                experiment=self.settings.experiment,
                space=self.space.name,
                objective=self.settings.objective,
                write=self.write,
            )
        outcome = close_parent(
            self.client, self.parent, outcomes, summary, unfinished, elapsed_s, interrupted
        )
        return SearchResult(
            self.settings,
            outcomes,
            summary,
            unfinished,
            outcome,
            elapsed_s,
            dashboard,
            reconciled,
            stopped_by,
        )

    def stopped(
        self, dashboard: str | None, elapsed_s: float, interruption: Interruption
    ) -> SearchResult:
        """A signal stopped the driver where it was (before Tune ran, a second signal
        while Tune stopped, or after it returned): every run of the search still open is
        closed ``search_ended``, the parent ``interrupted`` (KILLED); the outcomes are
        Tune's results when it returned, else what its saved experiment holds."""
        stopped_by = interruption.reason or "SIGINT"
        results = self.results
        if results is None:
            results = _extend.saved_results(self.settings)
        outcomes = _outcomes(results, self.shown, False, self.ended.ids)
        done = sum(o.status in _ENDED for o in outcomes)
        unfinished = max(self.num_samples - done, 0)
        summary = format_summary(outcomes, self.settings.objective, self.baselines)
        self.tracker.flush(wait_s=min(self.settings.tracking_wait_s, 30.0))
        self.tracker.runs.end_running(Outcome.SEARCH_ENDED)
        outcome = close_parent(
            self.client, self.parent, outcomes, summary, unfinished, elapsed_s, True
        )
        resumable = _extend.resumable(self.settings)
        return SearchResult(
            self.settings,
            outcomes,
            summary,
            unfinished,
            outcome,
            elapsed_s,
            dashboard,
            ReconcileReport(),
            stopped_by,
            resumable,
        )

    def _flush(self) -> None:
        settings = self.settings
        if self.tracker.pending and not self.tracker.flush():
            queue = self.tracker.queue
            if queue.disk_full is not None:
                raise SearchError(
                    f"{queue.why_pending(settings.tracking_wait_s)}: {queue.pending} "
                    "record(s) are not in MLflow yet. No training is lost: Tune keeps every "
                    f"result under {settings.experiment_path}. Free some space, then run "
                    f"`{settings.resume_command}` to record them."
                )
            raise SearchError(
                f"the MLflow tracking store at {settings.tracking_uri} did not come back within "
                f"--tracking-wait {settings.tracking_wait_s:g} s; {self.tracker.pending} "
                "record(s) are not in MLflow yet. No training is lost: Tune keeps every result "
                f"under {settings.experiment_path}. Once the store answers, run "
                f"`{settings.resume_command}` to record them."
            )


def _local_paths(settings: SearchSettings) -> list[Path]:
    """The local directories a search writes to (the DiskGuard watches them)."""
    paths = [settings.layout.root]
    if "://" not in settings.storage_path:
        paths.append(Path(settings.storage_path))
    for uri in (settings.tracking_uri, settings.optuna_storage):
        if uri.startswith("sqlite:///"):
            paths.append(Path(uri.removeprefix("sqlite:///")).parent)
    return paths


def stopping_epochs(
    settings: SearchSettings, space: SearchSpace, fixed: dict[str, Any]
) -> list[int]:
    """The epochs at which the search's scheduler may stop a trial (ASHA's rungs; none
    under FIFO): there a trial's report holds its own test battery (trainables.loop),
    which a trial stopped right after it could not deliver with a later report."""
    epochs = int(fixed["epochs"])
    if resolve_scheduler(settings.scheduler, settings.objective, epochs) != "asha":
        return []
    return asha_rungs(epochs, cycle_epochs(space.fixed, fixed))


def _trainable(
    settings: SearchSettings,
    space: SearchSpace,
    resources: Resources,
    data: TrainingData | str,
    benchmark: SemanticBenchmark | None,
    complete_at: Sequence[int] = (),
) -> Any:
    """The one trainable, its data shipped through Ray's object store (copied once to
    each node that runs trials) and its resources attached. ``complete_at``: where ASHA
    may stop a trial, its report holds its own test battery (trainables.loop)."""
    return tune.with_resources(
        tune.with_parameters(
            grounded_trainable,
            data=data,
            senteval=benchmark,
            gpu_share=resources.gpu_share,
            verify=settings.verify,
            helpers=tuple(space.helpers()),
            seeds_per_config=settings.seeds_per_config,
            complete_at=tuple(complete_at),
            progress_dir=str(progress_dir(settings.layout.root, settings.experiment)),
        ),
        {"cpu": resources.cpu, "gpu": resources.gpu},
    )


def _as_list(value: str | list[str]) -> list[str]:
    return list(value) if isinstance(value, list) else [value]


def _first(value: Any) -> Any:
    """Tune's own metric/mode: the first objective (the searcher handles both)."""
    return value[0] if isinstance(value, list) else value


# the outcomes of trials that need nothing more (a --resume leaves them as they are)
_ENDED = (Outcome.FINISHED.value, Outcome.STOPPED_EARLY.value, Outcome.FAILED.value)


class _Ended(Callback):
    """The ids of the trials Tune completed: ran to their end, or stopped by the
    scheduler (not those it ended because the search was interrupted)."""

    def __init__(self) -> None:
        self.ids: set[str] = set()

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.ids.add(str(trial.trial_id))


def _trial_id(result: Any) -> str:
    return str((result.metrics or {}).get("trial_id", "?"))


def _outcomes(
    results: Any,
    searched: Sequence[str],
    complete: bool,
    ended: set[str] | frozenset[str] = frozenset(),
) -> list[TrialOutcome]:
    """One per trial of Tune's ``results``. ``complete``: no trial is left to run;
    ``ended``: trials Tune completed (a trial without its ensemble among them was
    stopped early, not by the search's end)."""
    outcomes = []
    for result in results:
        metrics = {k: v for k, v in (result.metrics or {}).items() if isinstance(v, (int, float))}
        trial_id = _trial_id(result)
        status = classify(
            metrics,
            error=result.error is not None,
            search_complete=complete or trial_id in ended,
        )
        config = result.config or {}
        shown = {k: config[k] for k in searched if k in config}
        outcomes.append(TrialOutcome(trial_id, shown, metrics, status.value))
    return outcomes
