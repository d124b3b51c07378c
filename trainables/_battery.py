"""The test battery off the training's critical path: when an epoch's battery runs
(``BatterySchedule``), and the worker that runs it in the background (``BatteryWorker``).

Nothing selects on the battery, so after an epoch the Trainer (``trainables.loop``)
evaluates what selects (dev retrieval, the dev semantic score) and test retrieval in
place, and hands the battery to a background worker (a thread, on a GPU with its own
CUDA stream) that embeds and scores with a copy of the epoch's weights while the next
epoch trains. Its metrics are filed under their own epoch: the battery started after
epoch e is collected at the end of epoch e + 1 (waiting there only if it is not done),
merged into ``history[e]`` (where the checkpoint keeps it), and delivered with the
report of epoch e + 1 as ``names.late(key)`` beside ``names.LATE_EPOCH`` = e, which the
search's tracking callback logs at MLflow step e (``gridsearch.tracking``). The same
rule for every epoch makes the delivery deterministic (a trial's seeds deliver alike).
Where a report must hold its own battery it waits for it: the last epoch (whose report
also holds the ensemble's, computed while the battery runs) and the epochs in
``complete_at`` (where a scheduler may stop the trial: ASHA's rungs; every epoch in it,
each report holds its own battery). A run that stops in between (an interrupt, a closed
generator) files the batteries that finished into ``history``; a battery still running
is lost with the run, but a run resumed from a checkpoint whose last epoch lacks its
battery computes it again from the checkpoint's weights (those very weights) and
delivers it with the next report (a run resumed only to finish that last epoch waits
for it in that epoch's report). The worker is the Trainer's one path; the battery
computed in place, in the training thread, is a reference outside the package
(``bench/_in_place_battery.py``), which the tests hold the worker's metrics to
(tests/trainables/test_loop.py) and ``bench/bench_eval.py`` times the first path with.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Callable, Mapping, Sequence

import torch

from trainables import names
from trainables.model import GroundedEncoder
from trainables.relatedness import cpu_threads

__all__ = ["BatterySchedule", "BatteryWorker", "file_battery"]

Battery = Callable[[Sequence[GroundedEncoder]], dict[str, float]]  # models -> the metrics
History = list[dict[str, float]]  # the metrics reported after each epoch, epoch 0 first


class BatterySchedule:
    """When an epoch's test battery runs, and where its metrics go (module docstring):
    due every ``every`` epochs (0: never), run by ``worker``, filed into the history
    under its own epoch, and carried by the next report (``take_late``)."""

    def __init__(self, device: torch.device, every: int) -> None:
        self.worker = BatteryWorker(device)
        self.every = every
        self._late: dict[str, float] = {}  # an earlier epoch's battery, for the next report

    def due(self, epoch: int) -> bool:
        return bool(self.every) and epoch % self.every == 0

    def missing(self, metrics: Mapping[str, float]) -> bool:
        """``metrics`` (an epoch of the history) should hold the test battery and do not:
        it was running when the run that reported them stopped."""
        epoch = int(metrics["epoch"])
        return self.due(epoch) and names.key(names.TEST, "semantic") not in metrics

    def start(self, epoch: int, model: GroundedEncoder, battery: Battery) -> None:
        """``battery`` of ``epoch``'s ``model``, started in the worker."""
        self.worker.start(epoch, model, battery)

    def collect_left(self, history: History) -> None:
        """A battery that a run of the same Trainer left running when it stopped: filed
        under its epoch, for the next report."""
        if self.worker.busy:
            epoch, battery = self.worker.collect()
            if any(int(m["epoch"]) == epoch for m in history):
                self._late = file_battery(history, epoch, battery)

    def collect_earlier(self, epoch: int, history: History) -> None:
        """The battery of an epoch before ``epoch``, if one is running or done: filed under
        its epoch, for the next report."""
        if self.worker.busy and self.worker.epoch != epoch:
            self._late = file_battery(history, *self.worker.collect())

    def collect_own(self, metrics: dict[str, float]) -> None:
        """The battery of the epoch of ``metrics``, if one runs: waited for, into
        ``metrics`` (whose ``time/eval_s`` counts the wait)."""
        if self.worker.busy:
            waited = time.perf_counter()
            metrics.update(self.worker.collect()[1])
            metrics[names.EVAL_SECONDS] += time.perf_counter() - waited

    def wait(self) -> dict[str, float]:
        """The metrics of the battery running (waited for); none if none runs."""
        return self.worker.collect()[1] if self.worker.busy else {}

    def take_late(self) -> dict[str, float]:
        """An earlier epoch's battery, collected since the last call, in its ``late/``
        form (``file_battery``); once."""
        late, self._late = self._late, {}
        return late

    def settle(self, history: History) -> None:
        """A run that stops: a battery that finished goes into ``history`` (and so into
        the next checkpoint); one still running is left to finish unread."""
        if self.worker.finished:
            with contextlib.suppress(Exception):  # a failed battery: nothing to keep
                epoch, battery = self.worker.collect()
                if any(int(m["epoch"]) == epoch for m in history):
                    file_battery(history, epoch, battery)


def file_battery(history: History, epoch: int, battery: Mapping[str, float]) -> dict[str, float]:
    """File an earlier epoch's battery into ``history`` (where it belongs); the
    ``late/`` form the next report carries it in."""
    for metrics in reversed(history):
        if int(metrics["epoch"]) == epoch:
            metrics.update(battery)
            break
    else:
        raise RuntimeError(f"the battery of epoch {epoch} has no epoch in the history")
    return {names.LATE_EPOCH: float(epoch), **{names.late(k): v for k, v in battery.items()}}


class BatteryWorker:
    """The test battery of one epoch at a time, computed in a background thread from a
    copy of the epoch's weights (``start``), collected by the training thread
    (``collect``). On a GPU the thread works on its own CUDA stream, after the copy (made
    on the training stream, so the next step cannot overwrite what it reads); on the
    CPU it runs with one torch thread. The copy is one model kept for the purpose and
    refilled at each start (one battery at a time, so nothing else reads it then)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.shadow: GroundedEncoder | None = None
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.epoch: int | None = None  # the epoch of the battery started, until collected
        # set once the battery started last has embedded its sentences (or has ended)
        self.table_ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._result: dict[str, float] | None = None
        self._error: BaseException | None = None

    @property
    def busy(self) -> bool:
        """A battery was started and not collected yet (running or finished)."""
        return self._thread is not None

    @property
    def finished(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def start(
        self,
        epoch: int,
        model: GroundedEncoder,
        battery: Battery,
    ) -> None:
        if self._thread is not None:
            raise RuntimeError(f"the battery of epoch {self.epoch} was not collected")
        with torch.no_grad():
            if self.shadow is not None:
                try:
                    self.shadow.load_state_dict(model.state_dict())
                except RuntimeError:  # a model rebuilt since (a resumed word model)
                    self.shadow = None
            if self.shadow is None:
                self.shadow = copy.deepcopy(model)  # no RNG drawn: training's stays as it was
        ready = None
        if self.stream is not None:
            ready = torch.cuda.Event()
            ready.record()  # on the training stream, after the copy
        shadow, stream = self.shadow, self.stream

        def work() -> None:
            try:
                if stream is not None:
                    with torch.cuda.device(self.device), torch.cuda.stream(stream):
                        assert ready is not None
                        stream.wait_event(ready)
                        result = battery([shadow])
                        stream.synchronize()  # its memory may be reused once it returns
                else:
                    with cpu_threads(1, "cpu"):
                        result = battery([shadow])
                self._result = result
            except BaseException as err:  # raised again in collect()
                self._error = err
            finally:
                self.table_ready.set()  # no one waits for a table that will not come

        self.epoch, self._result, self._error = epoch, None, None
        self.table_ready.clear()
        self._thread = threading.Thread(target=work, name=f"test battery {epoch}", daemon=True)
        self._thread.start()

    def collect(self) -> tuple[int, dict[str, float]]:
        """Wait for the battery started last; its epoch and metrics (or raise its error)."""
        if self._thread is None or self.epoch is None:
            raise RuntimeError("no battery was started")
        self._thread.join()
        epoch, result, error = self.epoch, self._result, self._error
        self._thread, self.epoch, self._result, self._error = None, None, None, None
        if error is not None:  # as it was raised (an out-of-memory error stays one)
            error.add_note(f"in the test battery of epoch {epoch}, computed in the background")
            raise error
        assert result is not None
        return epoch, result
