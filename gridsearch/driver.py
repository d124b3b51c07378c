"""The search driver: Ray, data, MLflow, Optuna and Tune, wired together once."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
from ray.tune.search import ConcurrencyLimiter
from ray.tune.search.optuna import OptunaSearch

from gridsearch.cluster import fixed_settings, resources_for, start_ray
from gridsearch.progress import ProgressPrinter
from gridsearch.settings import (
    SMOKE_WORLD_IMAGES,
    SearchError,
    SearchSettings,
    save_record,
)
from gridsearch.spaces import SearchSpace, get_space, load_space_file, sample_config
from gridsearch.summary import TrialOutcome, format_summary
from gridsearch.tracking import (
    TrackingError,
    TrialTracker,
    check_reachable,
    ensure_experiment,
    start_parent_run,
    train_keys,
)
from storage import FeatureStore, StoreError
from storage.build import build_synthetic
from storage.senteval import SemanticBenchmark, load_senteval
from trainables import names
from trainables.config import TrainConfig
from trainables.data import TrainingData, default_senteval
from trainables.semantic import DevSemanticEvaluator
from trainables.tune import grounded_trainable

logger = logging.getLogger(__name__)


def search_trainable(
    config: dict[str, Any],
    data: TrainingData | str,
    senteval: SemanticBenchmark | None,
    gpu_share: float | None,
    verify: bool,
) -> None:
    """The trial: the thin trainable, minus the helper parameters that OptunaSearch adds to
    every config (e.g. ``variant`` of paper_grid; the space already decoded them)."""
    grounded_trainable(train_keys(config), data, senteval, gpu_share, verify)


def run_search(settings: SearchSettings, started: float) -> None:
    args = settings.args
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # A trial restored from its checkpoint reports its last epochs again; the searcher
    # keeps the first report (as MLflow does), so Optuna's warning about it is noise.
    warnings.filterwarnings("ignore", message="The reported value is ignored", module="optuna")
    space = _load_space(settings)
    experiment_path = f"{settings.storage_path.rstrip('/')}/{settings.experiment}"
    _check_experiment_path(experiment_path, resume=args.resume)
    client = _tracking_client(settings)
    store, senteval, data = _data(settings)  # before Ray: forked render workers must not carry it
    benchmark = _benchmark(senteval, args.objective)
    dashboard = start_ray(args)
    try:
        resources = resources_for(args)
        fixed = fixed_settings(args, resources)
        experiment_id = ensure_experiment(
            client, settings.experiment, settings.runs_dir / "mlartifacts"
        )
        searcher, num_samples, sampler_name = _searcher(settings, space, fixed, resources)
        parent = start_parent_run(
            client,
            experiment_id,
            settings.experiment,
            params=_parent_params(
                settings, space, fixed, resources, num_samples, sampler_name, store, senteval
            ),
            tags={"space": space.name, "objective": args.objective},
            artifacts={"space.json": space.to_dict(), "fixed.json": fixed},
        )
        trainable = tune.with_resources(
            tune.with_parameters(
                search_trainable,
                data=data,
                senteval=benchmark,
                gpu_share=resources["gpu"] if 0 < resources["gpu"] < 1 else None,
                verify=not args.no_verify,
            ),
            {"cpu": resources["cpu"], "gpu": resources["gpu"]},
        )
        tracker = TrialTracker(
            settings.tracking_uri,
            experiment_id,
            parent,
            {"space": space.name, "objective": args.objective},
            wait_s=args.tracking_wait,
        )
        callbacks = [tracker, ProgressPrinter(_searched_keys(space), int(fixed["epochs"]))]
        scheduler = _scheduler(settings, space, fixed)
        tuner = _tuner(
            settings, trainable, searcher, num_samples, scheduler, callbacks, experiment_path
        )
        print(
            f"searching {space.name!r} ({num_samples} trials, {sampler_name}, "
            f"{settings.scheduler}, objective {args.objective}) as {settings.experiment!r}",
            flush=True,
        )
        results = tuner.fit()
        unfinished = max(num_samples - results.num_terminated - results.num_errors, 0)
        _settle(settings, tracker, results, complete=unfinished == 0)
        _finish(settings, client, parent, _outcomes(results, space), unfinished, dashboard, started)
    finally:
        if not args.address:
            ray.shutdown()


def _settle(
    settings: SearchSettings, tracker: TrialTracker, results: Any, *, complete: bool
) -> None:
    """After Tune: every epoch Tune holds is in MLflow, no run is left RUNNING, and no
    Optuna trial is left RUNNING once the search is complete."""
    if tracker.pending and not tracker.flush():
        raise SearchError(
            f"the MLflow tracking store at {settings.tracking_uri} did not come back within "
            f"--tracking-wait {settings.args.tracking_wait:g} s; {tracker.pending} record(s) "
            "are not in MLflow yet. No training is lost: Tune keeps every result under "
            f"{settings.storage_path}/{settings.experiment}. Once the store answers, run "
            f"`python -m gridsearch.run --experiment {settings.experiment} --resume "
            f"--runs-dir {settings.runs_dir}` to record them."
        )
    report = tracker.reconcile(results, complete=complete)
    if report.epochs or report.closed or report.abandoned:
        print(
            f"recorded from Tune's results what MLflow lacked: {report.epochs} epoch(s), "
            f"{report.closed} run(s) closed, {report.abandoned} run(s) of trials lost with "
            "a stopped driver marked abandoned",
            flush=True,
        )
    if complete:
        _close_optuna_leftovers(settings)


def _close_optuna_leftovers(settings: SearchSettings) -> None:
    """Trials that Optuna handed out but Tune never ran to the end (their driver was
    killed before Tune saved them) would stay RUNNING in the study forever."""
    study = optuna.load_study(study_name=settings.experiment, storage=_optuna_url(settings))
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(trial.number, state=optuna.trial.TrialState.FAIL)


def _benchmark(senteval: str | None, objective: str) -> SemanticBenchmark | None:
    """The semantic sets, loaded once here and shipped with the data, so that no worker
    node needs the directory; a semantic objective needs their dev sets."""
    benchmark = None
    if senteval is not None:
        try:
            benchmark = load_senteval(senteval)
        except StoreError as err:
            raise SearchError(f"--senteval: {err}") from None
    if objective != "retrieval" and (benchmark is None or not DevSemanticEvaluator(benchmark)):
        raise SearchError(
            f"--objective {objective}: the semantic objective is the dev score on STS-B dev "
            "and SICK-R trial, and "
            + (
                "no semantic sets were given (--senteval DIR)"
                if benchmark is None
                else f"{senteval} has neither STS/STSBenchmark nor SICK"
            )
        )
    return benchmark


def _load_space(settings: SearchSettings) -> SearchSpace:
    args = settings.args
    try:
        return load_space_file(args.space_file) if args.space_file else get_space(args.space)
    except ValueError as err:
        raise SearchError(str(err)) from None


def _check_experiment_path(path: str, *, resume: bool) -> None:
    exists = tune.Tuner.can_restore(path)
    if resume and not exists:
        raise SearchError(
            f"--resume: {path} holds no Tune experiment to continue; check "
            "--experiment and --storage-path"
        )
    if not resume and exists:
        raise SearchError(
            f"{path} already holds a search; continue it with --resume or choose "
            "another --experiment"
        )


def _data(settings: SearchSettings) -> tuple[str, str | None, TrainingData | str]:
    """The store to train on, the semantic sets to evaluate on, and what the trials get:
    the data read here once (``--data-via object-store``; Ray ships it once per node) or
    the store's URI (``uri``; every trial reads it). Either way every shard is checked
    against the manifest's sha256 (unless ``--no-verify``) before any trial starts."""
    args = settings.args
    verify = not args.no_verify
    try:
        if args.data:
            # Trials run in other directories (and on other nodes): no relative paths.
            store = args.data if "://" in args.data else str(Path(args.data).resolve())
        else:
            smoke = args.smoke_test
            store = str(settings.runs_dir / ("world-smoke" if smoke else "world"))
            print(f"data: the embedded world in {store} (built once, then reused)", flush=True)
            build_synthetic(store, images=SMOKE_WORLD_IMAGES if smoke else 2000, seed=0)
        senteval = args.senteval or default_senteval(store)
        data: TrainingData | str = store
        if args.data_via == "uri":
            if verify:
                FeatureStore.open(store).verify()
        else:
            data = TrainingData.from_store(store, verify=verify)
    except StoreError as err:
        raise SearchError(f"{'--data' if args.data else 'the embedded world'}: {err}") from None
    if senteval is not None and not Path(senteval).is_dir():
        raise SearchError(f"--senteval {senteval}: not a directory")
    return store, senteval, data


def _tracking_client(settings: SearchSettings) -> Any:
    settings.runs_dir.mkdir(parents=True, exist_ok=True)  # the default sqlite file lives here
    try:
        return check_reachable(settings.tracking_uri)
    except TrackingError as err:
        raise SearchError(str(err)) from None


def _searcher(
    settings: SearchSettings, space: SearchSpace, fixed: dict[str, Any], resources: dict[str, float]
) -> tuple[Any, int, str]:
    args = settings.args
    if space.grid is not None:
        sampler: optuna.samplers.BaseSampler = optuna.samplers.GridSampler(
            dict(space.grid), seed=args.seed
        )
        name = "Optuna grid"
    else:
        sampler = optuna.samplers.TPESampler(seed=args.seed)
        name = "Optuna TPE" + (" (multi-objective)" if args.objective == "both" else "")
    default_samples = 2 if args.smoke_test else (4 if resources["gpu"] == 0 else 8)
    num_samples = args.num_samples or space.grid_size() or default_samples

    searcher = _ResumableOptunaSearch(
        space=_DefineByRun(space, fixed),
        metric=settings.metric,
        mode=settings.mode,
        sampler=sampler,
        study_name=settings.experiment,
        storage=optuna.storages.RDBStorage(_optuna_url(settings)),
    )
    return (
        ConcurrencyLimiter(searcher, max_concurrent=int(resources["concurrent"])),
        num_samples,
        name,
    )


class _ResumableOptunaSearch(OptunaSearch):
    """OptunaSearch that survives a restore replaying a trial the study already closed.

    When the driver dies after Optuna recorded a trial's end but before Tune saved its
    experiment state, ``--resume`` runs that trial again from its checkpoint, and its
    reports would reach a finished Optuna trial (an error that stops the search). The
    study keeps what it first recorded, as MLflow does."""

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            super().on_trial_result(trial_id, result)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            super().on_trial_complete(trial_id, result, error)


class _DefineByRun:
    """A trial's config: the run-level settings, overridden by the space (which may search
    e.g. hidden_size), with epochs, seed, device and threads always the run's. A class,
    not a closure, because Tune pickles the searcher into its experiment checkpoints."""

    _RUN_KEYS = ("epochs", "seed", "device", "threads")

    def __init__(self, space: SearchSpace, fixed: dict[str, Any]) -> None:
        self.space = space
        self.fixed = fixed

    def __call__(self, trial: optuna.Trial) -> dict[str, Any]:
        forced = {k: self.fixed[k] for k in self._RUN_KEYS}
        return {**self.fixed, **sample_config(self.space, trial), **forced}


def _optuna_url(settings: SearchSettings) -> str:
    if settings.args.optuna_storage:
        return str(settings.args.optuna_storage)
    if "://" in settings.storage_path:  # sqlite cannot live on s3/gs: keep it local
        folder = settings.runs_dir / "optuna"
    else:
        folder = Path(settings.storage_path)
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder.resolve() / (settings.experiment + '.optuna.db')}"


def _tuner(
    settings: SearchSettings,
    trainable: Any,
    searcher: Any,
    num_samples: int,
    scheduler: Any,
    callbacks: list[Any],
    experiment_path: str,
) -> tune.Tuner:
    args = settings.args
    if args.resume:
        return tune.Tuner.restore(
            experiment_path, trainable=trainable, resume_unfinished=True, resume_errored=True
        )
    save_record(args, settings.experiment)
    return tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            scheduler=scheduler,
            num_samples=num_samples,
            metric=_single(settings.metric),
            mode=_single(settings.mode),
            time_budget_s=args.time_budget,
            # A finished trial's worker process takes the next trial: no new process,
            # no second import of torch, and the data already in its memory.
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name=settings.experiment,
            storage_path=settings.storage_path,
            callbacks=callbacks,
            verbose=0,
            failure_config=tune.FailureConfig(max_failures=args.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
        ),
    )


def _scheduler(settings: SearchSettings, space: SearchSpace, fixed: dict[str, Any]) -> Any:
    """FIFO, or ASHA at the ends of the learning-rate cycles (the space's fixed
    ``cycle_epochs``, else the run's, else TrainConfig's), and a line saying where."""
    if settings.scheduler != "asha" or settings.args.resume:  # a resumed search has its own
        return FIFOScheduler()
    epochs = int(fixed["epochs"])
    cycle = int({**fixed, **space.fixed}.get("cycle_epochs", TrainConfig.cycle_epochs))
    rungs = asha_rungs(epochs, cycle)
    print(
        f"ASHA compares trials at the ends of the {cycle}-epoch learning-rate cycles: "
        + (
            f"at epoch {', '.join(map(str, rungs))}, each time stopping those below the "
            "median so far"
            if rungs
            else f"with {epochs} epochs no cycle ends before the last epoch, so no trial "
            "is stopped early"
        ),
        flush=True,
    )
    return asha_scheduler(epochs, cycle) or FIFOScheduler()


def asha_rungs(epochs: int, cycle_epochs: int) -> list[int]:
    """The epochs at which ASHA compares trials: the ends of learning-rate cycles, doubling
    (``cycle_epochs * 2**k``), before the last epoch. The cyclic cosine schedule is at its
    minimum there, where the snapshots are taken; early in a cycle the learning rate is
    still rising and the ranking of trials says little (a bench trial that ended the best
    stood at 15.9 against 26 for others after its first epoch)."""
    rungs, rung = [], cycle_epochs
    while rung < epochs:
        rungs.append(rung)
        rung *= 2
    return rungs


def asha_scheduler(epochs: int, cycle_epochs: int) -> ASHAScheduler | None:
    """ASHA on the reported ``epoch``, rungs at ``asha_rungs`` (reduction factor 2), every
    trial stopped at ``epochs``; None when no rung comes before the last epoch."""
    if not asha_rungs(epochs, cycle_epochs):
        return None
    return ASHAScheduler(
        time_attr="epoch", max_t=epochs, grace_period=cycle_epochs, reduction_factor=2
    )


def _single(value: Any) -> Any:
    """Tune's own metric/mode: the first objective (the searcher handles both)."""
    return value[0] if isinstance(value, list) else value


def _parent_params(
    settings: SearchSettings,
    space: SearchSpace,
    fixed: dict[str, Any],
    resources: dict[str, float],
    num_samples: int,
    sampler: str,
    store: str,
    senteval: str | None,
) -> dict[str, Any]:
    manifest = FeatureStore.open(store).location.read_bytes("manifest.json")
    return {
        "space": space.name,
        "space_definition": space.to_dict(),
        "sampler": sampler,
        "scheduler": settings.scheduler,
        "objective": settings.args.objective,
        "num_samples": num_samples,
        "epochs": fixed["epochs"],
        "time_budget_s": settings.args.time_budget,
        "max_concurrent": resources["concurrent"],
        "cpus_per_trial": resources["cpu"],
        "gpus_per_trial": resources["gpu"],
        "fixed": fixed,
        "data": store,
        "data_manifest_sha256": hashlib.sha256(manifest).hexdigest(),
        "senteval": senteval,
        "optuna_storage": _optuna_url(settings),
        "optuna_study": settings.experiment,
        "code_version": _code_version(),
    }


def _code_version() -> str:
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parent,
            timeout=10,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _searched_keys(space: SearchSpace) -> list[str]:
    """The TrainConfig keys a space sets per trial (not its helper parameters)."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    keys: dict[str, None] = {}
    for _ in range(8):  # a few draws, so every branch of a conditional space shows up
        keys.update(dict.fromkeys(space.suggest(study.ask())))
    return list(keys)


def _outcomes(results: Any, space: SearchSpace) -> list[TrialOutcome]:
    searched = _searched_keys(space)
    outcomes = []
    for result in results:
        metrics = {k: v for k, v in (result.metrics or {}).items() if isinstance(v, (int, float))}
        status = (
            "failed"
            if result.error
            else "finished"
            if names.is_finished(metrics)
            else "stopped_early"
        )
        config = train_keys(result.config or {})
        shown = {k: config[k] for k in searched if k in config}
        outcomes.append(
            TrialOutcome(str((result.metrics or {}).get("trial_id", "?")), shown, metrics, status)
        )
    return outcomes


def _finish(
    settings: SearchSettings,
    client: Any,
    parent: str,
    outcomes: list[TrialOutcome],
    unfinished: int,
    dashboard: str | None,
    started: float,
) -> None:
    summary = format_summary(outcomes, settings.args.objective)
    elapsed = time.perf_counter() - started
    print("\n" + summary)
    client.log_text(parent, summary + "\n", "summary.txt")
    for metric in (names.BEST_RETRIEVAL, names.BEST_SEMANTIC):
        values = [o.metrics[metric] for o in outcomes if metric in o.metrics]
        if values:
            client.log_metric(parent, f"search/{metric.replace('/', '_')}", max(values))
    client.log_metric(parent, "search/elapsed_s", elapsed)
    failed_all = outcomes and all(o.status == "failed" for o in outcomes)
    status = "KILLED" if unfinished else "FAILED" if failed_all else "FINISHED"
    client.set_tag(parent, "outcome", "interrupted" if unfinished else status.lower())
    client.set_terminated(parent, status)
    if unfinished:
        print(
            f"\nthe search stopped with {unfinished} trial(s) not finished after "
            f"{elapsed:.0f} s: continue it with the --resume command below"
        )
    else:
        print(f"\nfinished in {elapsed:.0f} s ({elapsed / 60:.1f} min)")
    print(f"compare the runs:  mlflow ui --backend-store-uri {settings.tracking_uri}")
    if dashboard:
        print(
            f"Ray dashboard:  {dashboard} (live while a search runs; for one that stays up, "
            "`ray start --head` and pass --address auto)"
        )
    print(
        f"continue or extend it:  python -m gridsearch.run --experiment {settings.experiment} "
        f"--resume --runs-dir {settings.runs_dir}"
    )
