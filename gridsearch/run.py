"""``python -m gridsearch.run``: the distributed hyperparameter search.

    python -m gridsearch.run --space margin_sweep
    python -m gridsearch.run --space paper_grid --data stores/flickr8k \
        --senteval SentEval/data/downstream
    python -m gridsearch.run --space full --objective both --num-samples 64 --address auto
    python -m gridsearch.run --experiment margin_sweep-20261122-101500 --resume

Optuna (through Ray Tune's OptunaSearch) samples the space; Ray Tune runs the trials on
this machine or a Ray cluster; the driver records every trial in MLflow (one parent run
per search, a nested run per trial). Without --data the embedded world is built once
(cached) and used. See ``--help`` and the README for every option. This module is the
only one of the package that prints.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING

# Our own progress view replaces Tune's tables; Tune's snapshot-frequency warning is
# expected (every epoch reports a checkpoint and only the last two are kept).
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
# Tune warns when one step of its loop took over 0.5 s ("may be a performance bottleneck"),
# which the callbacks' MLflow writes do on a busy machine; read when Tune is imported.
os.environ.setdefault("TUNE_WARN_THRESHOLD_S", "10")
# MLflow sets its logger to INFO when imported; its database set-up lines are not ours.
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")

from gridsearch._voice import PhaseTimes, Voice, process_age
from gridsearch.settings import NothingToRun, SearchError, SearchSettings, parse_args

if TYPE_CHECKING:  # the driver imports Ray: only when a search runs
    from gridsearch.driver import SearchResult

__all__ = ["main"]

logger = logging.getLogger(__name__)


def say(line: str) -> None:
    print(line, flush=True)


def _silent(line: str) -> None:
    """``--quiet``: no progress lines."""


def main(argv: Sequence[str] | None = None, *, started: float | None = None) -> int:
    """The command (``argv``: its words, else ``sys.argv``'s); its exit status.
    ``started``: when it began (``time.monotonic``), for its stamps and its "finished in"
    line; default now."""
    started = time.monotonic() if started is None else started
    if threading.current_thread() is not threading.main_thread():  # no signals there
        return _main(argv, started)
    previous = signal.signal(signal.SIGTERM, _terminated)  # until the driver's own handler
    try:
        return _main(argv, started)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: Sequence[str] | None, started: float) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as stop:  # --help, or a bad command line (its error: line is printed)
        return int(stop.code or 0)
    if args.list_spaces:
        from gridsearch.spaces import list_spaces

        print(list_spaces())
        return 0
    quiet = bool(args.quiet)
    logging.basicConfig(
        level=logging.ERROR if quiet else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("mlflow", "alembic"):  # their INFO lines (database set-up) are not ours
        logging.getLogger(noisy).setLevel(logging.WARNING)
    settings = None
    try:
        settings = SearchSettings.from_args(args)
        from gridsearch.spaces import load_space

        space = load_space(settings)  # a bad space file fails here, before Ray is imported
        voice = Voice(_silent if quiet else say, started=started, times=PhaseTimes())
        with voice:  # heard from while the libraries load, then while the search runs
            if "gridsearch.driver" not in sys.modules:  # not loaded by an earlier call yet
                with voice.phase("loading the search's libraries", "libraries",
                                 say="loading the search's libraries (PyTorch, Ray, MLflow, "
                                 "Optuna; {time})"):  # fmt: skip
                    import gridsearch.driver  # noqa: F401
            from gridsearch.driver import run_search

            result = run_search(settings, write=voice, space=space)
    except SearchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except NothingToRun as done:  # a --resume of a search that ran all its trials
        print(done, file=sys.stderr)
        return 0
    except KeyboardInterrupt:
        print(_before_it_ran(settings), file=sys.stderr)
        return 130
    return _report(result, quiet, started)


def _terminated(signum: int, frame: FrameType | None) -> None:
    """SIGTERM before the search runs (reading the data, opening the tracking store) stops
    it like Ctrl+C: the experiment's lock is released and the exit says how to go on,
    rather than Python's default death (status 143, a lock left behind)."""
    raise KeyboardInterrupt("SIGTERM")


def _before_it_ran(settings: SearchSettings | None) -> str:
    """What an interruption before any trial was recorded says: a search whose record
    exists (a --resume, or one Tune saved) continues with --resume; a new one that
    recorded nothing starts again with the same command."""
    if settings is not None and settings.layout.record(settings.experiment).exists():
        return f"interrupted before the search ran: continue it with `{settings.resume_command}`"
    return "interrupted before the search ran: nothing was recorded; run the same command again"


def _report(result: SearchResult, quiet: bool, started: float) -> int:
    """Print what the search found and how to go on; the exit status: 0 finished (or at
    its time budget), 130 interrupted (Ctrl+C, SIGTERM), 2 stopped by a full disk. With
    ``quiet`` (for scripts): the summary, and on stderr how it stopped and how to go on.
    A search that finished says last how long the command took, from ``started`` to this
    line (the process ends right after it: ``_command``)."""
    settings = result.settings
    say(result.summary if quiet else "\n" + result.summary)
    left = bool(result.unfinished or result.interrupted)  # an interrupted one is never done
    if quiet:
        if left:
            print(_stopped(result, time.monotonic() - started).strip(), file=sys.stderr)
            if result.resumable:
                print(f"continue it:  {settings.resume_command}", file=sys.stderr)
        return _status(result)
    if left:
        say(_stopped(result, time.monotonic() - started))
    _closing(result, left)
    if not left:
        wall_s = time.monotonic() - started
        say(f"\nfinished in {wall_s:.0f} s ({wall_s / 60:.1f} min)")
    return _status(result)


def _stopped(result: SearchResult, wall_s: float) -> str:
    """How an unfinished search stopped (after ``wall_s``), and whether --resume continues
    it."""
    if not result.resumable:
        return (
            f"\nthe search stopped ({result.stopped_by}) after {wall_s:.0f} s, before "
            "Tune saved anything: run the same command again to start it"
        )
    what = (
        f"with {result.unfinished} trial(s) not finished"
        if result.unfinished
        else "before it registered its best models"
    )
    return (
        f"\nthe search stopped ({result.stopped_by}) {what} after {wall_s:.0f} s: "
        "continue it with the --resume command below"
    )


def _closing(result: SearchResult, left: bool) -> None:
    """Where to look at the results, and the command that continues or extends it."""
    settings = result.settings
    from gridsearch.summary import closing_commands, ray_dashboard_line
    from gridsearch.tracking import results_link  # MLflow: imported once a search ran

    partial = not any(o.status == "finished" for o in result.outcomes)
    (runs, mlflow_ui), *others = closing_commands(settings, partial=partial)
    say(f"{runs}:  {mlflow_ui}")
    if (link := results_link(settings.tracking_uri, settings.experiment)) is not None:
        say(f"  and open {link}")
    if (charts := results_link(settings.tracking_uri, settings.experiment, True)) is not None:
        say(f"  retrieval against semantic, per epoch: {charts}")
    for what, command in others:  # the report, the Optuna study
        say(f"{what}:  {command}")
    if result.dashboard:
        say(ray_dashboard_line(settings, result.dashboard))
    if left and result.resumable:
        say(f"continue it:  {settings.resume_command}")
    elif not left:
        say(
            f"extend it to N > {len(result.outcomes)} trials (the same Optuna study):  "
            f"{settings.resume_command} --num-samples N"
        )


def _status(result: SearchResult) -> int:
    if not result.interrupted:
        return 0
    if result.stopped_by and result.stopped_by.startswith("no space"):
        print(
            f"error: {result.stopped_by}; free some space, then `{result.settings.resume_command}`",
            file=sys.stderr,
        )
        return 2
    return 130


def _command() -> None:
    """``python -m gridsearch.run``: ``main`` timed from the process's start, then the
    process ends at once. What Python's own exit would do after the last line (the exit
    handlers aside, run here) is tearing down the libraries' modules: seconds that the
    "finished in" line, then no longer the last thing to happen, would leave out."""
    age = process_age()
    code = main(started=None if age is None else time.monotonic() - age)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


if __name__ == "__main__":
    _command()
