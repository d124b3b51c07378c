"""The test battery of one epoch at a time in a background thread, off the training's
critical path (``trainables.loop`` says when the Trainer starts and collects one)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence

import torch

from trainables.model import GroundedEncoder
from trainables.relatedness import cpu_threads

__all__ = ["BatteryWorker"]


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
        battery: Callable[[Sequence[GroundedEncoder]], dict[str, float]],
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
