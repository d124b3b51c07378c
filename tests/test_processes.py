"""``tests.processes.finish``: the rest of a child's output after the test read a line,
with nothing its stream had read ahead lost (``communicate`` with a timeout loses it)."""

from __future__ import annotations

import subprocess
import sys

from tests.processes import finish

TWO_LINES_AT_ONCE = "import sys; sys.stdout.write('first\\nsecond\\n'); sys.stdout.flush()"


def _child() -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", TWO_LINES_AT_ONCE],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_what_the_stream_read_ahead_is_kept() -> None:
    process = _child()
    assert process.stdout is not None
    assert process.stdout.readline() == "first\n"  # "second\n" is in the stream's buffer
    out, err = finish(process, 60)
    assert (process.returncode, out, err) == (0, "second\n", "")


def test_communicate_with_a_timeout_loses_it() -> None:
    """Why ``finish`` exists: the way the drivers' tests read before."""
    process = _child()
    assert process.stdout is not None
    assert process.stdout.readline() == "first\n"
    out, _ = process.communicate(timeout=60)
    assert out == ""
