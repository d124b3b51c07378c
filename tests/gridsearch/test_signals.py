"""The driver's signal handler (``gridsearch._signals.Signals``) in a process of its own,
with real signals."""

from __future__ import annotations

import subprocess
import sys

import pytest

# A second Ctrl+C (the driver stops at once) that arrives while a finalizer runs (a cycle
# collected by the garbage collector, whose __del__ the signal interrupts), then one that
# arrives in a block the driver defers stops in (a write to the tracking store).
SCRIPT = """
import gc, os, signal, time
from gridsearch._interrupt import Interruption
from gridsearch._signals import Signals

class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.{name})  # the handler runs in here
        for _ in range(10_000):
            pass

with Signals(Interruption()) as signals:
    try:
        cycle = Finalized()
        cycle.me = cycle
        del cycle
        gc.collect()
        time.sleep(5)
        print("not stopped")
    except KeyboardInterrupt as stop:
        print("stopped:", stop)
    try:
        with signals.deferred():
            os.kill(os.getpid(), signal.{name})
            time.sleep(0.2)
            print("the block ended")
        print("not stopped")
    except KeyboardInterrupt as stop:
        print("stopped:", stop)
"""


@pytest.mark.slow  # 6 s: the process imports Ray Tune
def test_a_stop_is_raised_after_a_finalizer_or_a_deferred_block_it_meets() -> None:
    """Python cannot pass an exception out of a finalizer: it printed the stop as an
    ignored exception's traceback and the driver went on (a double Ctrl+C printed one).
    A stop inside SQLite left the tracking store locked and the trials' ends unrecorded:
    the writes are deferred blocks, which end before the stop is raised. SIGTERM: the stop
    raised later is the signal's own (SIGINT is the default)."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(name="SIGTERM")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:-1] == [
        "stopped: SIGTERM",
        "the block ended",
        "stopped: SIGTERM",
    ], done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr
