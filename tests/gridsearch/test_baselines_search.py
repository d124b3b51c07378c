"""Which searches compare with the store's baselines, and how a search gets them: read from
the store's cache at once, else computed beside the trials (``gridsearch._baselines``). What
a real search does with them (computed once per store and cached beside it, held against
the best trials in the summary, recorded in the parent run, read back by the next search,
drawn by the report) is read back from the shared smoke search of
tests/gridsearch/test_run.py, which spares a search of its own."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from gridsearch._baselines import COMPUTING, StoreBaselines
from gridsearch._voice import Voice
from gridsearch.settings import SearchSettings
from trainables import names
from trainables.baselines import cached_baselines
from trainables.data import default_senteval


@pytest.mark.parametrize(
    ("flags", "expected"),
    [([], True), (["--smoke-test"], False), (["--smoke-test", "--baselines"], True),
     (["--no-baselines"], False)],
)  # fmt: skip
def test_baselines_are_on_unless_a_smoke_test_or_turned_off(flags, expected, tmp_path) -> None:
    settings = SearchSettings.from_argv(
        ["--space", "margin_sweep", "--runs-dir", str(tmp_path), *flags]
    )
    assert settings.baselines is expected


@pytest.fixture
def store(tiny_world: Path, tmp_path: Path) -> Path:
    """A copy of the tiny world, without a cache of its baselines."""
    copy = tmp_path / "store"
    shutil.copytree(tiny_world, copy)
    return copy


@pytest.mark.slow
def test_baselines_computed_beside_the_search_are_cached_then_read_at_once(store: Path) -> None:
    lines: list[str] = []
    voice = Voice(lines.append, times=None)
    senteval = default_senteval(str(store))
    computing = StoreBaselines.start(str(store), senteval, voice)
    assert computing is not None and lines[0].split("] ", 1)[1].startswith(COMPUTING)
    table = computing.wait(voice)
    assert table is not None and computing.known() == table
    assert table == cached_baselines(str(store), senteval)  # what the store's cache holds
    assert "baselines: computed once for this store in " in lines[-1]
    assert names.key(names.TEST, "semantic") in table["ngram_ridge"]

    said = len(lines)  # the next search on the store: known before anything runs, unsaid
    read = StoreBaselines.start(str(store), senteval, voice)
    assert read is not None and read.known() == table and len(lines) == said


@pytest.mark.slow
def test_baselines_that_cannot_be_computed_are_said_and_left_out(store: Path) -> None:
    # the class: whatever the computation meets (here semantic sets that are not there)
    # is one line, and the search goes on without them
    lines: list[str] = []
    voice = Voice(lines.append, times=None)
    missing = store / "no-such-senteval"
    failed = StoreBaselines.start(str(store), str(missing), voice)
    assert failed is not None and failed.wait(voice) is None and failed.known() is None
    said = [line.split("] ", 1)[1] for line in lines]
    assert said[0].startswith(COMPUTING), said
    assert all("waiting for the store's char n-gram baselines" in line for line in said[1:-1])
    assert said[-1].startswith("baselines: not computed (") and str(missing) in said[-1]
    assert said[-1].endswith("; --no-baselines skips them") and "Traceback" not in said[-1]
    assert not (store / names.BASELINES_FILE).exists()


def test_baselines_whose_process_is_killed_are_said_and_left_out(store: Path) -> None:
    # killed by someone else (the kernel's OOM killer): said; ended by the search: unsaid
    lines: list[str] = []
    voice = Voice(lines.append, times=None)
    senteval = default_senteval(str(store))
    killed = StoreBaselines.start(str(store), senteval, voice)
    assert killed is not None and killed._process is not None
    os.kill(killed._process.pid, signal.SIGKILL)
    assert killed.wait(voice) is None
    assert lines[-1].split("] ", 1)[1] == (
        "baselines: not computed (ended by signal 9); --no-baselines skips them"
    )
    said = len(lines)
    stopped = StoreBaselines.start(str(store), senteval, voice)
    assert stopped is not None
    stopped.stop()
    assert stopped.known() is None and len(lines) == said + 1  # its COMPUTING line alone
    assert not (store / names.BASELINES_FILE).exists()
