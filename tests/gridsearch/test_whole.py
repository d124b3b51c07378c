"""``gridsearch._whole.WholeCopies`` while Tune rewrites its state files in place: what it
checks is what it copies (the disk-full cases are in ``test_disk_full.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gridsearch._damage import WHOLE_COPIES
from gridsearch._whole import WholeCopies

WHOLE = {"trial_data": [], "runner_data": {}, "stats": {"start_time": 1.0}}


def test_a_state_file_rewritten_while_it_is_read_is_copied_as_it_was_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tune's next save in place begins right after each read of the file (it is cut to
    half of what it was): the copy is the whole file that was read and checked, never the
    half a second read would meet; a file caught half written is not copied, without an
    error, and the last whole copy stays."""
    folder = tmp_path / "e"
    folder.mkdir()
    state = folder / "experiment_state-2026-01-01_00-00-00.json"
    whole = json.dumps(WHOLE).encode()
    state.write_bytes(whole)
    read = Path.read_bytes

    def read_then_rewritten(path: Path) -> bytes:
        data = read(path)
        if path == state:
            path.write_bytes(data[: len(data) // 2])  # Tune's write, half done
        return data

    monkeypatch.setattr(Path, "read_bytes", read_then_rewritten)
    copies = WholeCopies(folder)
    copy = folder / WHOLE_COPIES / state.name
    assert copies.copy() == [copy]
    assert read(copy) == whole
    assert copies.copy() == []  # half written now: not copied, not raised
    assert read(copy) == whole and not list(copy.parent.glob(".*.tmp"))
