"""The search: data, MLflow, Ray, Optuna and Tune wired together once.

``run_search(settings)`` runs a search (or continues one: ``settings.resume``) and
returns what it found as a ``SearchResult``. It prints nothing: every line a user should
see goes to ``write`` (``gridsearch.run`` passes ``print``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray import tune

from gridsearch import _optuna
from gridsearch._inputs import (
    check_experiment_path,
    load_benchmark,
    load_data,
    load_space,
    tracking_client,
)
from gridsearch._outcome import classify
from gridsearch._parent import close_parent, parent_params
from gridsearch._reconcile import ReconcileReport
from gridsearch._scheduler import cycle_epochs, describe_rungs, make_scheduler
from gridsearch._store import ensure_experiment, start_parent_run
from gridsearch.cluster import (
    Resources,
    fixed_settings,
    resources_for,
    start_ray,
    token_auth_enabled,
)
from gridsearch.progress import ProgressPrinter
from gridsearch.settings import SearchError, SearchSettings
from gridsearch.spaces import SearchSpace
from gridsearch.summary import TrialOutcome, format_summary
from gridsearch.tracking import TrialTracker
from storage.senteval import SemanticBenchmark
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


def run_search(settings: SearchSettings, *, write: Write = _silent) -> SearchResult:
    """Run (or continue) the search ``settings`` describe. Bad input or an unusable
    environment raises ``SearchError`` before anything is written."""
    started = time.perf_counter()
    _optuna.quiet()
    space = load_space(settings)
    check_experiment_path(settings)
    client = tracking_client(settings)
    store, senteval, data = load_data(settings, write)  # before Ray: forked workers must not
    benchmark = load_benchmark(senteval, settings.objective)
    dashboard = start_ray(settings)
    if dashboard:
        write(f"Ray dashboard: {dashboard}")
        if token_auth_enabled():
            write(
                "  token authentication is on: `ray get-auth-token` prints the token to paste "
                "into the dashboard's login"
            )
    try:
        resources = resources_for(settings)
        fixed, note = fixed_settings(settings, resources)
        if note:
            write(note)
        trainable = _trainable(settings, space, resources, data, benchmark)
        run = _Run(settings, space, client, resources, fixed, store, senteval, write)
        results = run.tuner(trainable).fit()
        return run.finish(results, dashboard, time.perf_counter() - started)
    finally:
        if not settings.address:
            ray.shutdown()


class _Run:
    """One search's MLflow records and Tune experiment, from start to finish."""

    def __init__(
        self,
        settings: SearchSettings,
        space: SearchSpace,
        client: Any,
        resources: Resources,
        fixed: dict[str, Any],
        store: str,
        senteval: str | None,
        write: Write,
    ) -> None:
        self.settings, self.space, self.client, self.write = settings, space, client, write
        if settings.optuna_storage.startswith("sqlite:///"):  # the study's folder
            study = Path(settings.optuna_storage.removeprefix("sqlite:///"))
            study.parent.mkdir(parents=True, exist_ok=True)
        sampler, self.sampler_name = _optuna.make_sampler(
            space, settings.seed, multi_objective=settings.objective == "both"
        )
        default = 2 if settings.smoke_test else (4 if resources.gpu == 0 else 8)
        self.num_samples = settings.num_samples or space.grid_size() or default
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
        self.searched = space.searched_keys()
        self.epochs = int(fixed["epochs"])
        self.cycle = cycle_epochs(space.fixed, fixed)
        self._start_tracking(resources, fixed, store, senteval)

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

    def tuner(self, trainable: Any) -> tune.Tuner:
        settings = self.settings
        callbacks = [self.tracker, ProgressPrinter(self.searched, self.epochs, self.write)]
        if settings.resume:  # the experiment keeps its own scheduler and searcher
            return tune.Tuner.restore(
                settings.experiment_path,
                trainable=trainable,
                resume_unfinished=True,
                resume_errored=True,
            )
        if settings.scheduler == "asha":
            self.write(describe_rungs(self.epochs, self.cycle))
        self.write(
            f"searching {self.space.name!r} ({self.num_samples} trials, {self.sampler_name}, "
            f"{settings.scheduler}, objective {settings.objective}) as {settings.experiment!r}"
        )
        settings.save_record()
        return tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(
                search_alg=self.searcher,
                scheduler=make_scheduler(settings.scheduler, self.epochs, self.cycle),
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

    def finish(self, results: Any, dashboard: str | None, elapsed_s: float) -> SearchResult:
        """After Tune: every epoch Tune holds is in MLflow, no run is left RUNNING, no
        Optuna trial is left RUNNING once the search is complete; the parent closed."""
        unfinished = max(self.num_samples - results.num_terminated - results.num_errors, 0)
        complete = unfinished == 0
        self._flush()
        reconciled = self.tracker.reconcile(results, complete=complete)
        if reconciled:
            self.write(
                f"recorded from Tune's results what MLflow lacked: {reconciled.epochs} "
                f"epoch(s), {reconciled.closed} run(s) closed, {reconciled.abandoned} run(s) "
                "of trials lost with a stopped driver marked abandoned"
            )
        if complete:
            _optuna.close_leftovers(self.settings.experiment, self.settings.optuna_storage)
        outcomes = _outcomes(results, self.searched, complete)
        summary = format_summary(outcomes, self.settings.objective)
        outcome = close_parent(self.client, self.parent, outcomes, summary, unfinished, elapsed_s)
        return SearchResult(
            self.settings, outcomes, summary, unfinished, outcome, elapsed_s, dashboard, reconciled
        )

    def _flush(self) -> None:
        settings = self.settings
        if self.tracker.pending and not self.tracker.flush():
            raise SearchError(
                f"the MLflow tracking store at {settings.tracking_uri} did not come back within "
                f"--tracking-wait {settings.tracking_wait_s:g} s; {self.tracker.pending} "
                "record(s) are not in MLflow yet. No training is lost: Tune keeps every result "
                f"under {settings.experiment_path}. Once the store answers, run "
                f"`{settings.resume_command}` to record them."
            )


def _trainable(
    settings: SearchSettings,
    space: SearchSpace,
    resources: Resources,
    data: TrainingData | str,
    benchmark: SemanticBenchmark | None,
) -> Any:
    """The one trainable, its data shipped through Ray's object store (copied once to
    each node that runs trials) and its resources attached."""
    return tune.with_resources(
        tune.with_parameters(
            grounded_trainable,
            data=data,
            senteval=benchmark,
            gpu_share=resources.gpu_share,
            verify=settings.verify,
            helpers=tuple(space.helpers()),
        ),
        {"cpu": resources.cpu, "gpu": resources.gpu},
    )


def _first(value: Any) -> Any:
    """Tune's own metric/mode: the first objective (the searcher handles both)."""
    return value[0] if isinstance(value, list) else value


def _outcomes(results: Any, searched: Sequence[str], complete: bool) -> list[TrialOutcome]:
    outcomes = []
    for result in results:
        metrics = {k: v for k, v in (result.metrics or {}).items() if isinstance(v, (int, float))}
        status = classify(metrics, error=result.error is not None, search_complete=complete)
        config = result.config or {}
        shown = {k: config[k] for k in searched if k in config}
        trial_id = str((result.metrics or {}).get("trial_id", "?"))
        outcomes.append(TrialOutcome(trial_id, shown, metrics, status.value))
    return outcomes
