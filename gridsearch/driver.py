"""The search: data, MLflow, Ray, Optuna and Tune wired together once.

``run_search(settings)`` runs a search (or continues one: ``settings.resume``) and
returns what it found as a ``SearchResult``. It prints nothing: every line a user should
see goes to ``write`` (``gridsearch.run`` passes ``print``).

Here: the inputs read once, Ray started and stopped, the one trainable. Its parts:
``_search_setup`` (the MLflow records, the sampler and the Tune tuner), ``_search_end``
(the trials' outcomes, the best models registered, the parent run closed) and
``_signals`` (SIGINT and SIGTERM while it runs).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import ray
from ray import tune

from gridsearch import _damage, _extend, _optuna, _relocate, _settle
from gridsearch._baselines import StoreBaselines
from gridsearch._inputs import (
    check_experiment_path,
    load_benchmark,
    load_data,
    prepare_runs_dir,
    tracking_client,
)
from gridsearch._interrupt import Interruption
from gridsearch._lock import ExperimentLock, LockHeld, setup_lock
from gridsearch._outcome import is_disk_full
from gridsearch._scheduler import asha_rungs, cycle_epochs
from gridsearch._scheduler_choice import resolve_scheduler
from gridsearch._search_end import SearchResult, finish, stopped
from gridsearch._search_setup import SearchInputs, SearchRun, Write
from gridsearch._signals import Signals
from gridsearch._voice import QUIET_S, Voice, voice_of
from gridsearch.cluster import (
    Resources,
    fixed_settings,
    ray_start_line,
    resources_for,
    start_ray,
    token_auth_enabled,
)
from gridsearch.settings import SearchError, SearchSettings, first_objective
from gridsearch.spaces import SearchSpace, load_space
from storage.cli import error_line
from storage.senteval import SemanticBenchmark
from trainables import cpp_loop_build_seconds, prebuild_cpp_loop
from trainables.data import TrainingData
from trainables.tune import start_signals, trial

__all__ = ["SearchResult", "run_search"]


def _silent(line: str) -> None:
    """The default ``write``: a library call prints nothing."""


def run_search(
    settings: SearchSettings, *, write: Write = _silent, space: SearchSpace | None = None
) -> SearchResult:
    """Run (or continue) the search ``settings`` describe (``space``: its space, when the
    caller loaded it already). Bad input or an unusable environment raises ``SearchError``
    before anything is written; another driver running the same experiment, too.
    ``write`` takes every line, stamped (``gridsearch._voice``: pass a ``Voice`` to stamp
    from an earlier start); while the search runs it is never silent for long."""
    voice = voice_of(write)
    with voice:
        return _run_search(settings, voice, space)


def _run_search(settings: SearchSettings, write: Voice, space: SearchSpace | None) -> SearchResult:
    started = time.perf_counter()
    _optuna.quiet()
    space = space or load_space(settings)
    check_experiment_path(settings)
    lock = ExperimentLock(
        settings.layout.lock(settings.experiment), f"--experiment {settings.experiment}"
    )
    try:
        # another driver running this experiment may be writing the state the checks
        # below read: it is named first, and they run again under the lock
        lock.check_free()
        prepare_runs_dir(settings)  # a runs directory that takes no files fails first
        if settings.resume:  # every file a resume writes to, before it writes any
            _extend.check_writable(settings)
        with lock:  # before the experiment is read: another driver may be writing it
            check_experiment_path(settings)  # again, now that no other driver can start it
            if settings.resume:  # a damaged state file: one line, before Ray (or its last
                # whole copy put in its place, before a move rewrites what it names)
                for line in _damage.check_resume_state(settings):
                    write(line)
            if settings.moved_from is not None:  # a copied or moved runs directory
                write(_relocate.relocate(settings))
            # a hard stop's finished trials, saved as running: kept finished
            settled = _settle.settle_finished(settings) if settings.resume else {}
            if settled:
                write(
                    f"{len(settled)} trial(s) finished before the search stopped, though "
                    f"Tune's last save said running ({', '.join(settled)}): kept as "
                    "finished, not run again"
                )
            if settings.resume:  # nothing left to run, or fewer trials than recorded
                _extend.check_resume(settings)
            # before Ray: forked workers must not read the store again
            store, senteval, data = load_data(settings, write)
            benchmark = load_benchmark(senteval, settings.objective)
            with (
                setup_lock(settings.layout.setup_lock),
                write.phase("opening the MLflow tracking store", "tracking store"),
            ):
                client = tracking_client(settings)
            baselines = None  # computed beside the first trials, where not cached
            if settings.baselines:
                baselines = StoreBaselines.start(store, senteval, write)
            try:
                inputs = SearchInputs(
                    space, client, store, senteval, data, benchmark, baselines, settled
                )
                if settings.recurrence == "compiled":  # once per key: no trial compiles it
                    building = "building the C++ recurrence, or waiting for the process that does"
                    with write.phase(building, estimate_s=cpp_loop_build_seconds()):
                        prebuild_cpp_loop(write)
                return _with_ray(settings, inputs, write, started)
            finally:
                if baselines is not None:  # a search that stopped does not wait for them
                    baselines.stop()
    except LockHeld as err:
        raise SearchError(str(err)) from None


def _with_ray(
    settings: SearchSettings, inputs: SearchInputs, write: Voice, started: float
) -> SearchResult:
    interruption = Interruption()
    with Signals(interruption) as signals:
        what, key, note = ray_start_line(settings)
        with write.phase(what, key, say=what, note=note):
            dashboard = start_ray(settings)
        signals.install()  # ray.init set its own SIGTERM handler
        run: SearchRun | None = None
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
            side = start_signals()  # the trials' side channel: stops and progress
            trainable = _trainable(
                settings, inputs.space, resources, inputs.data, inputs.benchmark, rungs, side
            )
            with write.phase("recording the search in MLflow and Optuna", "search records"):
                run = SearchRun(settings, inputs, resources, fixed, write)
            run.tracker.queue.guard = signals.deferred  # no record cut short by a stop
            tuner = run.tuner(trainable, interruption, side)
            signals.tune_running = True
            try:  # the progress lines break the silence; this only when Tune's loop hangs
                with write.phase("running the trials", quiet_s=QUIET_S + 3):
                    results = _fit(tuner, settings)
            finally:
                signals.tune_running = False
            result = finish(run, results, dashboard, time.perf_counter() - started, interruption)
        except KeyboardInterrupt:
            signals.done = True  # closing what was opened: not to be cut short again
            if run is None:  # nothing recorded yet: run.py says how to start again
                raise
            result = stopped(run, dashboard, time.perf_counter() - started, interruption)
        finally:
            signals.done = True  # recorded (or not started): a late signal changes nothing
            stopping = "leaving the Ray cluster" if settings.address else "stopping the local Ray"
            with write.phase(stopping, "ray stop" if not settings.address else "ray leave"):
                ray.shutdown()  # a joined cluster (--address) runs on: only this driver leaves
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
            "no space left on a device the search writes to "
            f"({error_line(err, 200, last=True)}); free some space and continue with "
            f"`{settings.resume_command}` (Tune keeps every finished epoch under "
            f"{settings.experiment_path}, --resume records what MLflow lacks)"
        ) from None


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
    signals: Any = None,
) -> Any:
    """The one trainable, its data shipped through Ray's object store (copied once to
    each node that runs trials) and its resources attached. ``complete_at``: where ASHA
    may stop a member, its report holds its own test battery (trainables.loop);
    ``signals``: the trials' ``TrialSignals`` actor."""
    metric, mode = first_objective(settings.objective)
    return tune.with_resources(
        tune.with_parameters(
            trial,
            data=data,
            senteval=benchmark,
            gpu_share=resources.gpu_share,
            verify=settings.verify,
            helpers=tuple(space.helpers()),
            seeds_per_config=settings.seeds_per_config,
            complete_at=tuple(complete_at),
            signals=signals,
            metric=metric,
            mode=mode,
        ),
        {"cpu": resources.cpu, "gpu": resources.gpu},
    )
