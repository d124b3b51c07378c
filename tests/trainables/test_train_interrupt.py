"""Ctrl+C during `python -m trainables.train`: a real process, a real SIGINT after its
first trained epoch. It stops cleanly (exit 130, one line: what was saved and the
command that resumes), the checkpoint is whole, and that command goes on from it (run
in the test's process: there is nothing to signal in the resumed run, and a fresh
interpreter would only add the imports of torch)."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.processes import finish
from trainables import names
from trainables.checkpoint import load_training_state
from trainables.train import main

REPO = Path(__file__).resolve().parents[2]
OPTIONS = ["--hidden-size", "8", "--batch-size", "8", "--device", "cpu", "--threads", "1",
           "--semantic-every", "0", "--snapshot-interval", "1", "--json"]  # fmt: skip


def _default_sigint() -> None:
    # A process started from a shell's background job inherits SIGINT ignored, and
    # Python then never raises KeyboardInterrupt; a terminal's Ctrl+C finds the default.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _train(argv: list[str], **options: Any) -> subprocess.Popen[str]:
    """``python -m trainables.train *argv`` with its output read as text as it comes."""
    return subprocess.Popen(
        [sys.executable, "-m", "trainables.train", *argv],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **options,
    )


def _interrupt_after_epoch_1(argv: list[str]) -> tuple[int, list[str], list[str]]:
    """Run ``python -m trainables.train *argv``, send SIGINT as soon as epoch 1 is
    printed; (exit status, stdout lines, stderr lines)."""
    process = _train(argv, preexec_fn=_default_sigint)
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if '"epoch": 1.0' in line:
            process.send_signal(signal.SIGINT)
            break
    out, err = finish(process, 300)
    return process.returncode, (lines + out.splitlines(keepends=True)), err.splitlines()


@pytest.mark.slow
def test_ctrl_c_keeps_the_last_checkpoint_and_says_how_to_resume(
    tiny_world: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "run.pt"
    argv = ["--data", str(tiny_world), *OPTIONS, "--epochs", "4", "--checkpoint", str(path)]
    code, out, err = _interrupt_after_epoch_1(argv)
    assert code == 130
    assert [line for line in err if "Traceback" in line or line.startswith("error")] == []
    line = err[-1]
    match = re.fullmatch(
        r"interrupted after epoch (\d+) of 4: the last complete checkpoint is (.+) "
        r"\(epoch (\d+)\); resume with: (.+)",
        line,
    )
    assert match is not None, line
    printed, saved = int(match[1]), int(match[3])
    assert match[2] == str(path) and saved == printed >= 1  # an epoch printed is saved
    assert len(out) == printed + 1  # epochs 0..printed, nothing half-printed
    state = load_training_state(path)  # whole, not half-written
    assert state["epoch"] == saved and len(state["history"]) == saved + 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.pt"]  # no temporary file
    command = shlex.split(match[4])
    assert command == ["python", "-m", "trainables.train", *argv]

    capsys.readouterr()
    status = main(command[3:])  # the printed command, `python -m trainables.train` taken off
    resumed_out, resumed_err = capsys.readouterr()
    assert status == 0, resumed_err
    epochs = [int(json.loads(line)["epoch"]) for line in resumed_out.splitlines()]
    assert epochs == list(range(saved + 1, 5))
    assert names.is_finished(load_training_state(path)["history"][-1])


@pytest.mark.slow
def test_ctrl_c_without_a_checkpoint_says_nothing_was_saved(
    tiny_world: Path, tmp_path: Path
) -> None:
    argv = ["--data", str(tiny_world), *OPTIONS, "--epochs", "30"]
    code, out, err = _interrupt_after_epoch_1(argv)
    assert code == 130 and len(out) >= 2
    assert [line for line in err if "Traceback" in line or line.startswith("error")] == []
    assert err[-1] == (
        f"interrupted after epoch {len(out) - 1} of 30: nothing was saved (no --checkpoint); "
        "to keep every epoch's progress and resume after a stop, run: "
        f"python -m trainables.train {shlex.join(argv)} --checkpoint FILE"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_closed_output_stops_cleanly(tiny_world: Path, tmp_path: Path) -> None:
    """`... | head -1`: the reader goes away; the run stops saying so, no traceback."""
    path = tmp_path / "run.pt"
    argv = ["--data", str(tiny_world), *OPTIONS, "--epochs", "30", "--checkpoint", str(path)]
    process = _train(argv)
    assert process.stdout is not None and process.stderr is not None
    assert '"epoch": 0.0' in process.stdout.readline()
    process.stdout.close()  # as `head -1` exits
    err = process.stderr.read().splitlines()
    assert process.wait(timeout=300) == 141  # 128 + SIGPIPE, as a shell reports it
    assert not [line for line in err if "Traceback" in line or "Exception ignored" in line]
    assert err[-1].startswith("stopped (its output was closed) after epoch ")
    assert f"resume with: python -m trainables.train {shlex.join(argv)}" in err[-1]
    load_training_state(path)  # whole
