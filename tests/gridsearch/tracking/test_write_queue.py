"""The retrying write queue, with no Tune and no MLflow: a store that answers, one that
refuses a write, and one that goes away and comes back."""

from __future__ import annotations

import logging
import time

import pytest

from gridsearch.tracking._write_queue import WriteQueue


class Store:
    """A fake tracking store: ``up`` or not; ``refuse`` names writes it rejects."""

    def __init__(self) -> None:
        self.up = True
        self.refuse: set[str] = set()
        self.written: list[str] = []

    def write(self, what: str):
        def apply() -> None:
            if not self.up:
                raise ConnectionError("connection refused")
            if what in self.refuse:
                raise ValueError(f"bad value for {what}")
            self.written.append(what)

        return apply

    def reachable(self) -> bool:
        return self.up


def test_writes_go_through_in_order() -> None:
    store = Store()
    queue = WriteQueue(store.reachable, "fake")
    for what in ("a", "b", "c"):
        queue.submit(what, store.write(what))
    assert store.written == ["a", "b", "c"] and queue.pending == 0
    assert queue.said() is None  # nothing to say: every write went through at once


def test_a_refused_write_is_dropped_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    store = Store()
    store.refuse = {"b"}
    queue = WriteQueue(store.reachable, "fake")
    with caplog.at_level(logging.ERROR, logger="gridsearch.tracking._write_queue"):
        for what in ("a", "b", "c"):
            queue.submit(what, store.write(what))
    assert store.written == ["a", "c"] and queue.pending == 0
    assert "MLflow refused b (ValueError: bad value for b); skipped" in caplog.text
    assert queue.said() == "MLflow at fake: 1 write(s) refused by it and skipped (logged)"


def test_writes_wait_while_the_store_is_away_and_keep_their_order(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = Store()
    queue = WriteQueue(store.reachable, "fake", retry_every_s=0.05)
    store.up = False
    with caplog.at_level(logging.WARNING, logger="gridsearch.tracking._write_queue"):
        queue.submit("a", store.write("a"))
        queue.submit("b", store.write("b"))  # retried no sooner than retry_every_s
        assert queue.pending == 2 and store.written == []
        assert not queue.flush(wait_s=0.1)  # still away: gives up after wait_s
        assert queue.said() == "MLflow at fake: 2 write(s) still waiting"
        store.up = True
        started = time.monotonic()
        assert queue.flush(wait_s=5)
    assert time.monotonic() - started < 1
    assert store.written == ["a", "b"] and queue.pending == 0
    assert "is not answering (ConnectionError: connection refused)" in caplog.text
    assert "is back after" in caplog.text
    # the search's summary and its parent run say it: no retry passes for a plain success
    said = queue.said()
    assert said is not None and said.startswith(
        "MLflow at fake: 2 write(s) waited for the store, away or full once ("
    ), said
    assert said.endswith(" s in all), and then went through")


def test_flush_without_waiting_returns_at_once_while_away() -> None:
    store = Store()
    store.up = False
    queue = WriteQueue(store.reachable, "fake", retry_every_s=60)
    queue.submit("a", store.write("a"))
    started = time.monotonic()
    assert not queue.flush()
    assert time.monotonic() - started < 0.5
