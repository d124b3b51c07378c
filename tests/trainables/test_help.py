"""`python -m trainables.train --help` and `python -m trainables.encode --help` read as
plain text and say every option's default, or that it is required; and training the
paper's sizes on a CPU says so, once, before it starts."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.help_text import check_help, help_of
from trainables import encode, train
from trainables.config import CPU_SIZED, TrainConfig


@pytest.mark.parametrize("main", [train.main, encode.main], ids=["train", "encode"])
def test_the_help_is_plain_text_with_every_default(main: Callable[[list[str]], int]) -> None:
    found = check_help(help_of(main, []))
    assert len(found) >= (40 if main is train.main else 10)


def test_every_training_option_says_what_it_is_and_its_paper_default() -> None:
    text = help_of(train.main, [])
    found = check_help(text)
    assert found["--hidden-size"][1].startswith("n: RNN units per direction")
    assert found["--hidden-size"][1].endswith(f"(default: {TrainConfig.hidden_size})")
    assert found["--epochs"][1].endswith(f"(default: {TrainConfig.epochs})")
    # the paper's sizes on a CPU too, said in the help, with the CPU-sized options
    description = " ".join(text.split())
    assert "the paper's Flickr8k sizes (n = 1024, 32 epochs) on every device, a CPU too" in (
        description
    )
    assert " ".join(f"--{k.replace('_', '-')} {v}" for k, v in CPU_SIZED.items()) in description


def _stderr_until_training(tiny_world: Path, *options: str) -> list[str]:
    """The stderr lines of a real training run up to its "training on" line; then it is
    stopped (the paper's sizes would train for long)."""
    command = [sys.executable, "-m", "trainables.train", "--data", str(tiny_world),
               "--device", "cpu", "--threads", "1", *options]  # fmt: skip
    process = subprocess.Popen(
        command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    lines: list[str] = []
    try:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line.rstrip("\n"))
            if line.startswith("training on"):
                break
    finally:
        process.kill()
        process.wait(timeout=60)
    assert lines and lines[-1].startswith("training on"), lines
    return lines


@pytest.mark.slow
def test_a_cpu_run_of_the_paper_sizes_says_so_once_before_it_starts(tiny_world: Path) -> None:
    lines = _stderr_until_training(tiny_world)
    notes = [line for line in lines if line.startswith("note: the paper's sizes")]
    assert len(notes) == 1 and "on the CPU take hours" in notes[0]
    assert "--hidden-size 32" in notes[0]
    sized = _stderr_until_training(tiny_world, "--hidden-size", "32", "--epochs", "4")
    assert not [line for line in sized if line.startswith("note:")]
