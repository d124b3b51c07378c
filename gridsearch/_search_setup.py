"""A search's set-up: its MLflow experiment and parent run, its Optuna sampler and
searcher (a warm start), and the Tune tuner that runs it (``gridsearch.driver``; its end
is ``gridsearch._search_end``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune import Callback

from gridsearch import _extend, _optuna
from gridsearch._baselines import StoreBaselines
from gridsearch._groups import group_search
from gridsearch._interrupt import DiskGuard, Interruption
from gridsearch._layout import local_path, sqlite_file
from gridsearch._resumed import BadRecord, check_record
from gridsearch._scheduler import cycle_epochs, describe_rungs, make_scheduler
from gridsearch._scheduler_choice import FIFO_BELOW_EPOCHS, resolve_scheduler
from gridsearch._voice import voice_of
from gridsearch._whole import WholeCopies
from gridsearch.cluster import Resources
from gridsearch.progress import ProgressPrinter, shown_keys
from gridsearch.settings import SearchError, SearchSettings, first_objective
from gridsearch.spaces import SearchSpace
from gridsearch.tracking import TrialTracker, ensure_experiment, parent_params, start_parent_run
from storage.senteval import SemanticBenchmark
from trainables.baselines import BASELINES_FILE, json_text
from trainables.data import TrainingData

__all__ = ["SearchInputs", "SearchRun", "Write"]

Write = Callable[[str], None]


@dataclass(frozen=True)
class SearchInputs:
    space: SearchSpace
    client: Any
    store: str
    senteval: str | None
    data: TrainingData | str
    benchmark: SemanticBenchmark | None
    baselines: StoreBaselines | None  # the store's (trainables.baselines); None: off
    # a --resume's trials that finished though Tune's last save said running, with their
    # last results (_settle.settle_finished)
    settled: Mapping[str, dict[str, Any]] = field(default_factory=dict)


class SearchRun:
    """One search's MLflow records and Tune experiment, from start to finish."""

    def __init__(
        self,
        settings: SearchSettings,
        inputs: SearchInputs,
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
        if (study := sqlite_file(settings.optuna_storage)) is not None:  # the study's folder
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
        self.baselines_logged = False  # into the parent run (``log_baselines``)
        self.settled = inputs.settled  # trials a hard stop left saved as running, finished
        self.ended = _Ended()  # trials Tune ended (ran out or stopped by the scheduler)
        self.results: Any = None  # Tune's, once it returned
        self._start_tracking(resources, fixed, inputs.store, inputs.senteval)

    def _warm_start(self, fixed: dict[str, Any]) -> None:
        """Start the study from the ended trials of the earlier search --warm-start."""
        settings, source = self.settings, str(self.settings.warm_start)
        try:
            record = json.loads(settings.layout.record(source).read_text(encoding="utf-8"))
            if not isinstance(record, dict):
                raise BadRecord(f"a JSON {type(record).__name__}, expected an object")
            if "args" not in record:  # a record of the settings (not an older one's flags)
                check_record(record, SearchSettings)
            source_storage = str(record["optuna_storage"])
            copied, left = _optuna.warm_start(
                source,
                source_storage,
                study=settings.experiment,
                storage_url=settings.optuna_storage,
                modes=[settings.mode] if isinstance(settings.mode, str) else list(settings.mode),
                space=self.space,
                fixed=fixed,
            )
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as err:
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
            settings, space, fixed, resources, self.num_samples, self.sampler_name, store, senteval,
            labels=self.shown,
        )  # fmt: skip
        artifacts = {"space.json": space.to_dict(), "fixed.json": fixed}
        self.parent = start_parent_run(
            client, experiment_id, settings.experiment, params, tags, artifacts
        )
        self.log_baselines()  # where known already (read from the store's cache)
        self.tracker = TrialTracker(
            settings.tracking_uri,
            experiment_id,
            self.parent,
            tags,
            wait_s=settings.tracking_wait_s,
        )

    def log_baselines(self, *, wait: bool = False) -> dict[str, dict[str, float]] | None:
        """The store's baselines (``gridsearch._baselines``): logged into the parent run
        once known (the report draws them: strict JSON, NaN as null); ``wait``: waited for
        if still being computed. None: off, not known yet, or not computed."""
        if self.baselines is None:
            return None
        table = self.baselines.wait(voice_of(self.write)) if wait else self.baselines.known()
        if table is not None and not self.baselines_logged:
            self.client.log_dict(self.parent, json.loads(json_text(table)), BASELINES_FILE)
            self.baselines_logged = True
        return table

    def tuner(self, trainable: Any, interruption: Interruption, signals: Any) -> tune.Tuner:
        """The Tune tuner of the search (restored, for a ``--resume``); ``signals``: the
        trials' ``trainables.tune.TrialSignals`` actor, which stops members early and
        carries their progress."""
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
            guard,  # first: a trial's failure for a full disk is taken back before the rest
            self.tracker,
            ProgressPrinter(
                self.space,
                self.num_samples,
                self.epochs,
                settings.metric,
                self.write,
                signals=signals,
            ),
            self.ended,
        ]
        experiment = local_path(settings.experiment_path)
        if experiment is not None:  # the last whole copy of each state file (_whole)
            callbacks.append(WholeCopies(experiment))
        if settings.resume:  # the experiment keeps its own scheduler and searcher
            self.ended.ids |= _extend.ended_trials(settings)  # before this driver
            restoring = f"restoring Tune's experiment from {settings.experiment_path}"
            with voice_of(self.write).phase(restoring, "tune restore", say=restoring):
                restored = tune.Tuner.restore(
                    settings.experiment_path,
                    trainable=trainable,
                    resume_unfinished=True,
                    resume_errored=True,
                )
            _extend.use_callbacks(restored, callbacks)
            _extend.use_signals(restored, signals)
            if settings.num_samples is not None or self.settled:  # the record's, or more
                _extend.extend(restored, settings.num_samples or 0, self.settled)
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
            + (
                f", up to {settings.fuse} configurations of one shape fused per Tune trial"
                if settings.fuse > 1
                else ""
            )
            + f") as {settings.experiment!r}"
        )
        settings.save_record(num_samples=self.num_samples)
        scheduler = make_scheduler(
            settings.scheduler, self.epochs, self.cycle, settings.metric, settings.mode
        )
        metric, mode = first_objective(settings.objective)
        # every trial a group (of up to --fuse configurations of one shape), its members
        # stopped one by one by the search's scheduler
        self.searcher, scheduler = group_search(
            self.searcher, scheduler, fuse=settings.fuse, total=self.num_samples, signals=signals
        )
        return tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(
                search_alg=self.searcher,
                scheduler=scheduler,
                num_samples=self.num_samples,
                metric=metric,
                mode=mode,
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


def _local_paths(settings: SearchSettings) -> list[Path]:
    """The local directories a search writes to (the DiskGuard watches them)."""
    paths = [settings.layout.root]
    if "://" not in settings.storage_path:
        paths.append(Path(settings.storage_path))
    for uri in (settings.tracking_uri, settings.optuna_storage):
        if (database := sqlite_file(uri)) is not None:
            paths.append(database.parent)
    return paths


class _Ended(Callback):
    """The ids of the trials Tune completed: ran to their end, or stopped by the
    scheduler (not those it ended because the search was interrupted)."""

    def __init__(self) -> None:
        self.ids: set[str] = set()

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.ids.add(str(trial.trial_id))
