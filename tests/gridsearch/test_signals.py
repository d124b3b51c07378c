"""The driver's signal handler (``gridsearch._signals.Signals``) in a process of its own,
with real signals."""

from __future__ import annotations

import subprocess
import sys

import pytest

# A second Ctrl+C (the driver stops at once) that arrives while a finalizer runs: a cycle
# collected by the garbage collector, whose __del__ the signal interrupts.
SCRIPT = """
import gc, os, signal, time
from gridsearch._interrupt import Interruption
from gridsearch._signals import Signals

class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.{name})  # the handler runs in here
        for _ in range(10_000):
            pass

with Signals(Interruption()):
    try:
        cycle = Finalized()
        cycle.me = cycle
        del cycle
        gc.collect()
        time.sleep(5)
        print("not stopped")
    except KeyboardInterrupt as stop:
        print("stopped:", stop)
"""


@pytest.mark.slow  # 6 s: the process imports Ray Tune
def test_a_stop_that_meets_a_finalizer_is_raised_after_it_without_a_traceback() -> None:
    """Python cannot pass an exception out of a finalizer: it printed the stop as an
    ignored exception's traceback and the driver went on (a double Ctrl+C printed one).
    SIGTERM: the stop raised again is the signal's own (SIGINT is the default)."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(name="SIGTERM")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped: SIGTERM", done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr
