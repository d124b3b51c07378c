"""The search's voice: every line stamped from the command's start, each phase said with
how long it took the last time on this machine, and a phase silent for ``QUIET_S`` heard
from with how far it is (on a stepped clock; the thread on the real one). A real
search's stamps are read in tests/test_docs_tutorial.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gridsearch._voice import QUIET_S, PhaseTimes, Voice, clock_text, process_age


class Clock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


def _voice(tmp_path: Path, clock: Clock, **kwargs: object) -> tuple[Voice, list[str]]:
    lines: list[str] = []
    times = PhaseTimes(tmp_path / "times.json")
    return Voice(lines.append, clock=clock, times=times, **kwargs), lines  # type: ignore[arg-type]


def test_every_line_is_stamped_from_the_start(tmp_path: Path) -> None:
    clock = Clock()
    voice, lines = _voice(tmp_path, clock, started=clock.now - 3)
    voice("one\ntwo")
    clock.now += 62
    voice("three")
    assert lines == ["[   0:03] one", "[   0:03] two", "[   1:05] three"]
    assert clock_text(3725) == "1:02:05"


def test_a_phase_says_how_long_it_took_last_time_and_how_far_it_is(tmp_path: Path) -> None:
    clock = Clock()
    voice, lines = _voice(tmp_path, clock)
    with voice.phase("building the world", "world", say="data: building the world", note="once"):
        assert lines == ["[   0:00] data: building the world (not yet timed on this machine; once)"]
        clock.now += QUIET_S - 0.5
        assert not voice.heartbeat()  # heard from lately
        clock.now += 0.5
        assert voice.heartbeat()
        assert (
            lines[-1]
            == f"[   0:{QUIET_S:02.0f}]   still building the world: {QUIET_S:.0f} s so far"
        )
        clock.now += 14
    assert PhaseTimes(tmp_path / "times.json").get("world") == 14 + QUIET_S  # measured
    assert not voice.heartbeat()  # no phase: nothing to say

    with voice.phase("building the world", "world", say="data: building the world"):
        assert lines[-1].endswith(
            f"data: building the world (about {14 + QUIET_S:.0f} s, as measured the last time here)"
        )
        clock.now += QUIET_S
        voice.heartbeat()
        assert lines[-1].endswith(f"so far, about 14 s left ({14 + QUIET_S:.0f} s last time)")
        clock.now += 30
        voice.heartbeat()
        assert lines[-1].endswith(f"(longer than the {14 + QUIET_S:.0f} s it took last time)")


def test_a_phase_just_begun_is_said_as_begun_and_a_short_one_without_its_zero(
    tmp_path: Path,
) -> None:
    """The silence before a phase that has just begun was the phase before it: "now ...",
    not "still ...: 0 s so far (longer than the 0 s it took last time)"."""
    clock = Clock()
    voice, lines = _voice(tmp_path, clock)
    voice("the world is built")
    clock.now += QUIET_S - 0.2
    with voice.phase("opening the MLflow tracking store", "tracking", estimate_s=0.1):
        clock.now += 0.2
        assert voice.heartbeat()
        assert lines[-1].endswith("]   now opening the MLflow tracking store")
        clock.now += QUIET_S
        assert voice.heartbeat()
        assert lines[-1].endswith(
            f"still opening the MLflow tracking store: {QUIET_S:.0f} s so far"
            " (under a second last time)"
        )


def test_a_phase_that_fails_or_is_interrupted_is_not_measured(tmp_path: Path) -> None:
    clock = Clock()
    voice, _ = _voice(tmp_path, clock)
    with pytest.raises(KeyboardInterrupt), voice.phase("starting Ray", "ray start"):
        clock.now += 3
        raise KeyboardInterrupt
    assert PhaseTimes(tmp_path / "times.json").get("ray start") is None
    assert not voice.heartbeat()  # it ended all the same


def test_ending_a_phase_ends_those_begun_within_it(tmp_path: Path) -> None:
    clock = Clock()
    voice, lines = _voice(tmp_path, clock)
    outer = voice.begin("running the trials")
    voice.begin("starting the trials' workers")  # the first trial never started
    voice.end(outer, record=False)
    clock.now += 60
    assert not voice.heartbeat() and lines == []


@pytest.mark.parametrize("content", ["", "not json", "[1, 2]", '{"a": "fast"}'])
def test_an_unreadable_or_unwritable_record_gives_no_estimate(tmp_path: Path, content: str) -> None:
    path = tmp_path / "times.json"
    path.write_text(content)
    assert PhaseTimes(path).get("a") is None
    PhaseTimes(path).record("a", 2.5)
    assert PhaseTimes(path).get("a") == 2.5  # written anew
    blocked = tmp_path / "file" / "times.json"
    (tmp_path / "file").write_text("a file where a folder goes")
    PhaseTimes(blocked).record("a", 1.0)  # nothing raised
    assert PhaseTimes(blocked).get("a") is None


def test_the_thread_breaks_a_silence_and_stops_with_the_block(tmp_path: Path) -> None:
    lines: list[str] = []
    voice = Voice(lines.append, quiet_s=0.2)
    with voice, voice, voice.phase("waiting"):  # nested blocks: one thread
        deadline = time.monotonic() + 30
        while not lines and time.monotonic() < deadline:
            time.sleep(0.05)
    assert lines and "still waiting: " in lines[0]
    said = len(lines)
    time.sleep(1.2)
    assert len(lines) == said  # stopped


def test_the_process_age_is_read_where_proc_says_it() -> None:
    age = process_age()
    assert age is None or 0 <= age < 24 * 3600
