"""The search's live progress, as lines handed to a ``write`` function (``gridsearch.run``
passes ``print``, or nothing with ``--quiet``; a library caller passes its own, or
nothing). One concern over 400 lines: ``ProgressPrinter``, a Tune callback, and the state
it keeps to number trials, follow their members and estimate the time left (how its
lines say things is ``gridsearch._progress_lines``). Its lines:

    [   0:14] start 1/4  2c67bc1a  margin=0.3875
    [   0:19]       1/4  2c67bc1a  epoch 1/4  dev R@10 mean 60.0  dev semantic 0.167
    [   0:31] done  1/4  2c67bc1a  test R@10 mean 87.5 (ensemble); best dev R@10 mean 62.5
    [   0:31] 1 of 4 trials done, 2 running, 1 left | best dev R@10 mean 62.5: 2c67bc1a
              margin=0.3875 | 0:31 elapsed, about 1:10 left

(the status line is one line). A trial's start line names what it tried (the space's own
parameters, not every key a preset sets); its other lines name it by number (in the order
the trials started, after those a resumed search's earlier drivers ended) and id. An
epoch's line comes once Tune holds that epoch's checkpoint (``on_trial_save``), so a
search stopped after ``epoch N/`` is shown resumes after epoch N. The
status line comes after every trial that ends and, while trials run, every
``STATUS_EVERY_S``, and whenever the search was silent for ``QUIET_S`` (with each running
trial's epoch and, from the trials' signals actor ``trainables.tune.TrialSignals``, the
share of it done). Until the first trial starts, the search is starting the trials'
workers, a phase of the search's voice (``gridsearch._voice``), which says so and how long
it took the last time. Every line goes through that voice, which stamps it with the time
since the command began. "Best" is the search's selection
metric: the best dev value over a trial's epochs so far. The estimate assumes every trial
left trains all its epochs at the pace of this run so far (a scheduler stopping trials
early makes it shorter).

Every Tune trial is a group (``gridsearch._groups``) and the display counts
configurations, as the summary does: a trial of k members (``--fuse K``) takes k numbers
(``start 1-2/4``, its start line naming each member's ``m<i>``), a member is done once it
left its group (finished, or stopped early) and "best" is the best member (its own id,
``<trial>-m<i>``); an epoch line shows the member best on the first selection metric, and
the end line of a trial of several says how its members ended.

Not Tune's own reporters (``CLIReporter`` and its output engine, off: ``verbose=0``):
they print a table of Tune trials and their last results, so a fused trial is one row
however many configurations it trains, and they know neither the selection's best over a
trial's epochs, nor how far into an epoch a trial is, nor the time left.

``quiet_libraries`` (``gridsearch._quiet``) keeps the libraries' own noise out of the same
terminal.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ray
from ray.tune import Callback
from ray.tune.experiment import Trial
from ray.tune.result import SHOULD_CHECKPOINT

from gridsearch._members import Member, members_of
from gridsearch._outcome import failures_of, is_disk_full
from gridsearch._progress_lines import (
    EPOCH_METRICS,
    ends_text,
    label_text,
    number,
    running_text,
    shown_keys,
    value_text,
)
from gridsearch._quiet import quiet_libraries
from gridsearch._space import SearchSpace
from gridsearch._voice import QUIET_S, Voice, clock_text, voice_of
from trainables import names
from trainables.tune import member_metrics

__all__ = ["STATUS_EVERY_S", "ProgressPrinter", "quiet_libraries", "shown_keys"]

STARTING = (
    "starting the trials' workers (Ray processes that each import PyTorch and take the data"
    "; {time})"
)

STATUS_EVERY_S = 30.0  # a status line at least this often while trials run
ASK_WAIT_S = 0.05  # the longest a line waits for the trials' within-epoch progress
ENDED = (Trial.TERMINATED, Trial.ERROR)


def _silent(line: str) -> None:
    """What a restored copy of the progress printer writes to: nothing."""


class ProgressPrinter(Callback):
    """Progress lines of one search (module docstring). ``total``: the trials the search
    runs; ``epochs``: each trial's; ``metric``: the selection metric(s) (one, or a list for
    two objectives); ``signals``: the trials' ``TrialSignals`` actor, which holds their
    within-epoch progress (None: none shown), asked for at most ``ask_wait_s`` a line;
    ``clock``: seconds (monotonic). ``write`` is the search's ``Voice`` (a plain function
    is given one of its own, stamping from now on ``clock``)."""

    def __init__(
        self,
        space: SearchSpace,
        total: int,
        epochs: int,
        metric: str | Sequence[str],
        write: Callable[[str], None],
        *,
        signals: Any = None,
        ask_wait_s: float = ASK_WAIT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.space = space
        self.shown = shown_keys(space)
        self.total = total
        self.epochs = epochs
        self.metrics = [metric] if isinstance(metric, str) else list(metric)
        self.voice: Voice = voice_of(write, clock=clock, times=False)
        self.write = write
        self.signals = signals
        self.ask_wait_s = ask_wait_s
        self.clock = clock
        self.started = clock()
        self.last_status = self.started
        self.numbers: dict[str, int] = {}  # trial id -> its (first) number, in starting order
        self.numbered = 0  # configurations numbered so far (a fused trial takes several)
        self.ended: set[str] = set()
        self.member_last: dict[str, dict[str, Any]] = {}  # member id -> its last report
        self.left: set[str] = set()  # member ids that left their running fused trial
        self.units_at_start: float | None = None  # work done before this driver (a resume)
        self._asked: Any = None  # the signals actor's answer on progress, while awaited
        self._told: dict[str, dict[str, float]] = {}  # its last answer
        # trial id -> its epoch line, until Tune holds its checkpoint
        self._unsaved: dict[str, str] = {}
        self._starting: Any = None  # the voice's phase until the first trial starts

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (Tune's ``tuner.pkl`` keeps the callbacks) without the signals actor,
        which ends with its driver, and without ``write``, which ``cloudpickle`` would
        save as code when it lives in ``__main__`` (``python -m gridsearch.run``'s), and a
        ``--resume`` refuses a state file that holds code (``gridsearch._pickles``). A
        resumed search passes its own callbacks (``_extend.use_callbacks``)."""
        state = {**self.__dict__, "signals": None, "_asked": None, "write": _silent}
        return {**state, "voice": None, "_starting": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.voice = Voice(_silent, clock=self.clock)

    # -- Tune's callback API --------------------------------------------------

    def setup(
        self,
        stop: Any = None,
        num_samples: int | None = None,
        total_num_samples: int | None = None,
        **info: Any,
    ) -> None:
        quiet_libraries()
        note = getattr(self.space, "note", "")
        if note:
            self._print(note)
        self._starting = self.voice.begin("starting the trials' workers", "trial workers",
                                          say=STARTING)  # fmt: skip

    def on_trial_start(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        if self._starting is not None:  # the first trial started: its workers did
            self.voice.end(self._starting)
            self._starting = None
        for known in trials:  # a resumed search's trials that earlier drivers ended first
            if known.status in ENDED:
                self._number(known)
        self._print(f"start {self._number(trial)}  {trial.trial_id}  {self.label(trial)}".rstrip())

    def on_trial_result(
        self, iteration: int, trials: list[Trial], trial: Trial, result: dict[str, Any], **info: Any
    ) -> None:
        if "epoch" not in result:
            return
        members = self._members(trial)
        shown, lead = result, ""
        reports = self._track(trial.trial_id, members, result)
        if reports:
            position = self._lead(reports)
            shown = reports[position]
            if len(members) > 1:
                lead = f"  (m{position}, best of {len(reports)})"
        parts = [f"epoch {int(result['epoch'])}/{self.epochs}"]
        parts += [
            f"{label} {shown[key]:{spec}}" for label, key, spec in EPOCH_METRICS if key in shown
        ]
        line = f"      {self._number(trial)}  {trial.trial_id}  " + "  ".join(parts) + lead
        if result.get(SHOULD_CHECKPOINT):  # shown once Tune holds the epoch's checkpoint
            self._unsaved[trial.trial_id] = line
        else:
            self._print(line)

    def on_trial_save(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        """Tune registered the trial's checkpoint (after ``on_trial_result``): its epoch
        line now, so a search stopped once the line is shown resumes after that epoch."""
        self._flush(trial)

    def _flush(self, trial: Trial) -> None:
        line = self._unsaved.pop(trial.trial_id, None)
        if line is not None:
            self._print(line)

    def on_trial_complete(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self._flush(trial)
        self.ended.add(trial.trial_id)
        members = self._members(trial)
        if len(members) > 1:
            ends = ends_text([self._report(trial, m) for m in members], self.metrics)
        else:
            result = self._report(trial, members[0])
            if names.is_finished(result):
                ends = f"test R@10 mean {result[names.FINISHED]:.1f} (ensemble)"
            else:
                ends = f"stopped early after epoch {int(result.get('epoch', 0))}"
            best = [
                value_text(m, result) for m in self.metrics if number(result.get(m)) is not None
            ]
            ends += f"; best {', '.join(best)}" if best else ""
        self._print(f"done  {self._number(trial)}  {trial.trial_id}  {ends}")
        self._status(trials)

    def on_trial_error(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self._flush(trial)
        self.ended.add(trial.trial_id)
        error = trial.get_error()
        reason = str(error).strip().splitlines()[-1][:200] if error else "unknown error"
        self._print(f"FAILED {self._number(trial)}  {trial.trial_id}  {reason}")
        self._status(trials)

    def on_trial_recover(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        """Tune runs the trial again after a failure: said, with the cause (a failure for
        a full disk is the disk guard's to say: it stops the search)."""
        self._flush(trial)
        failures = failures_of(trial)
        if not failures.count or is_disk_full(failures.last):
            return
        self._print(
            f"RETRY {self._number(trial)}  {trial.trial_id}  failed "
            f"({failures.last or 'unknown error'}); run again from its last checkpoint "
            f"(failure {failures.count}, --max-failures {trial.max_failures})"
        )

    def on_step_end(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        if self.units_at_start is None and trials:
            self.units_at_start = self._units(trials, self._in_epoch())
        running = any(t.status == Trial.RUNNING for t in trials)
        due = self.clock() - self.last_status >= STATUS_EVERY_S
        if running and (due or self.voice.silent_for() >= QUIET_S):
            self._status(trials, detail=True)

    # -- the lines --------------------------------------------------------------

    def label(self, trial: Trial) -> str:
        """What the trial tried: the space's own parameters (``shown_keys``); a trial of
        several members, each member's (``m0 margin=0.2; m1 margin=0.3``)."""
        members = self._members(trial)
        if len(members) == 1:
            return self._label(members[0].config)
        return "; ".join(f"m{m.position} {self._label(m.config)}".rstrip() for m in members)

    def _label(self, config: Mapping[str, Any]) -> str:
        return label_text(config, self.shown)

    def status_line(self, trials: Sequence[Trial], detail: bool = False) -> str:
        """k of N trials done / running / left (configurations: a fused trial's members
        count one by one), the best so far, elapsed and an estimate; ``detail``: each
        running trial's epoch (and the share of it done)."""
        done = sum(self._done(t) for t in trials)
        running = [t for t in trials if t.status == Trial.RUNNING and t.trial_id not in self.ended]
        training = sum(self._size(t) - self._done(t) for t in running)
        left = max(self.total - done - training, 0)
        counts = f"{done} of {self.total} trials done, {training} running, {left} left"
        in_epoch = self._in_epoch()
        if detail and running:
            counts += (
                " (" + ", ".join(running_text(t, in_epoch, self.epochs) for t in running) + ")"
            )
        parts = [counts, *self._best(trials)]
        elapsed = self.clock() - self.started  # the estimate's: since the trials began
        estimate = self._estimate(trials, in_epoch, elapsed) if done < self.total else "done"
        parts.append(f"{clock_text(self.voice.elapsed())} elapsed, {estimate}")
        return " | ".join(parts)

    def _status(self, trials: Sequence[Trial], detail: bool = False) -> None:
        self.last_status = self.clock()
        self._print(self.status_line(trials, detail))

    def _print(self, text: str) -> None:
        self.voice(text)

    def _number(self, trial: Trial) -> str:
        """``3/8``; a fused trial's, the numbers of its members: ``3-4/8``."""
        size = self._size(trial)
        if trial.trial_id not in self.numbers:
            self.numbers[trial.trial_id] = self.numbered + 1
            self.numbered += size
        first = self.numbers[trial.trial_id]
        return f"{first}/{self.total}" if size == 1 else f"{first}-{first + size - 1}/{self.total}"

    # -- a trial's members ----------------------------------------------------------

    def _members(self, trial: Trial) -> list[Member]:
        return members_of(trial.trial_id, trial.config)

    def _size(self, trial: Trial) -> int:
        """The configurations ``trial`` trains (its members)."""
        return len(self._members(trial))

    def _done(self, trial: Trial) -> int:
        """How many of ``trial``'s configurations are done: all once it ended; of a
        running trial, the members that left it."""
        if trial.trial_id in self.ended or trial.status in ENDED:
            return self._size(trial)
        return sum(m.trial_id in self.left for m in self._members(trial))

    def _track(
        self, trial_id: str, members: Sequence[Member], result: Mapping[str, Any]
    ) -> dict[int, dict[str, Any]]:
        """Keep each member's report in ``result``; a member that reported its ensemble,
        or that a report leaves out (stopped early), left the group. Returns the
        members' reports."""
        reports = {p: r for p, r in member_metrics(dict(result)).items() if "epoch" in r}
        for member in members:
            report = reports.get(member.position)
            if report is not None:
                self.member_last[member.trial_id] = report
            if report is None or names.is_finished(report):
                self.left.add(member.trial_id)
        return reports

    def _lead(self, reports: Mapping[int, Mapping[str, Any]]) -> int:
        """The member best on the first selection metric (as the fused trial's own
        un-prefixed result chooses it: the first of equals)."""

        def score(position: int) -> float:
            value = number(reports[position].get(self.metrics[0]))
            return -math.inf if value is None else value

        return max(sorted(reports), key=score)

    def _best(self, trials: Sequence[Trial]) -> list[str]:
        """The best trial so far per selection metric (dev only), with what it tried."""
        found = []
        for metric in self.metrics:
            scored = []
            for trial in trials:  # each member by its own id, last report and config
                for member in self._members(trial):
                    report = self._report(trial, member)
                    if (value := number(report.get(metric))) is not None:
                        scored.append((value, member.trial_id, member.config))
            if scored:
                value, name, config = max(scored, key=lambda found: found[0])
                label = " ".join(filter(None, (name, self._label(config))))
                found.append(f"best {value_text(metric, {metric: value})}: {label}")
        return found

    def _report(self, trial: Trial, member: Member) -> Mapping[str, Any]:
        """The member's last report: seen by this printer, else in its trial's last
        result (a trial that ran before a --resume), else none."""
        if member.trial_id in self.member_last:
            return self.member_last[member.trial_id]
        return member_metrics(dict(trial.last_result or {})).get(member.position, {})

    # -- the estimate -----------------------------------------------------------

    def _units(self, trials: Sequence[Trial], in_epoch: Mapping[str, Mapping[str, float]]) -> float:
        """Work done, in reported epochs (epoch 0, the untrained evaluation, counts as
        one): an ended trial counts all of its own; a running one, its reports and the
        share of the epoch it trains."""
        units = 0.0
        for trial in trials:
            if trial.trial_id in self.ended or trial.status in ENDED:
                units += (self.epochs + 1) * self._size(trial)
                continue
            members = self._members(trial)  # those that left count whole, as an ended trial
            units += (self.epochs + 1) * sum(m.trial_id in self.left for m in members)
            reports = [
                self.member_last.get(m.trial_id, {}) for m in members if m.trial_id not in self.left
            ]
            now = in_epoch.get(trial.trial_id)
            for report in reports:
                reported = int(report.get("epoch", -1)) + 1
                units += reported
                if now is not None and int(now["epoch"]) == reported and reported <= self.epochs:
                    units += float(now["done"])
        return units

    def _estimate(
        self,
        trials: Sequence[Trial],
        in_epoch: Mapping[str, Mapping[str, float]],
        elapsed: float,
    ) -> str:
        units = self._units(trials, in_epoch)
        left = self.total * (self.epochs + 1) - units
        if left <= 0:
            return "finishing"
        since = units - self.units_at_start if self.units_at_start is not None else 0.0
        if since <= 0 or elapsed <= 0:
            return "an estimate after the first epoch"
        return f"about {clock_text(left * elapsed / since)} left"

    def _in_epoch(self) -> dict[str, dict[str, float]]:
        """The running trials' within-epoch progress, as they told their signals actor
        (the last answer while a new one takes longer than ``ask_wait_s``: a display
        never holds up the search)."""
        if self.signals is None:
            return {}
        try:
            if self._asked is None:
                self._asked = self.signals.progress.remote()
            ready, _ = ray.wait([self._asked], timeout=self.ask_wait_s)
            if ready:  # else still asked (an actor starting on a busy machine): kept
                self._told, self._asked = dict(ray.get(self._asked)), None
        except Exception:  # the actor is gone: the last answer stands
            self._asked = None
        return self._told
