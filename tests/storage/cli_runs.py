"""Running the storage CLIs as a user would, and checking the house rule for bad input:
exit status 2 and exactly one ``error:`` line on stderr, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image

from tests.storage.karpathy_files import flickr_entry, write_images, write_json

REPO = Path(__file__).resolve().parents[2]
# A random-weight ResNet on the CPU, no worker processes: the real extraction path, fast.
RESNET = ["--weights", "random", "--device", "cpu", "--workers", "0"]


@dataclass(frozen=True)
class Outcome:
    status: int
    out: str
    err: str

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.startswith("error: ")]


def run_main(
    main: Callable[[list[str]], int], argv: Sequence[str], capfd: pytest.CaptureFixture[str]
) -> Outcome:
    """Call a CLI's real ``main`` in this process; ``capfd`` also sees native output."""
    capfd.readouterr()
    try:
        status = main(list(argv))
    except SystemExit as exit_:  # argparse exits for a bad command line
        status = exit_.code if isinstance(exit_.code, int) else 1
    captured = capfd.readouterr()
    return Outcome(status, captured.out, captured.err)


def run_module(
    module: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 120
) -> Outcome:
    """Run ``python -m module argv`` in a fresh process, as a user would (``env`` is added
    to this process's environment)."""
    result = subprocess.run(
        [sys.executable, "-m", module, *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    return Outcome(result.returncode, result.stdout, result.stderr)


def assert_refused(outcome: Outcome, *fragments: str, only_line: bool = False) -> str:
    """Exit status 2, one ``error:`` line holding every fragment, no traceback; with
    ``only_line`` nothing else on stderr at all. Returns the error line."""
    assert "Traceback" not in outcome.err, outcome.err
    assert outcome.status == 2, outcome
    assert len(outcome.error_lines) == 1, outcome.err
    line = outcome.error_lines[0]
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    if only_line:
        assert outcome.err == line + "\n", outcome.err
    return line


def flickr_set(root: Path, splits: Sequence[str] = ("train", "val", "test")) -> tuple[Path, Path]:
    """A Flickr-format JSON with one image per entry of ``splits`` and real JPEGs for them:
    ``(json path, images directory)``."""
    entries = [flickr_entry(k, split) for k, split in enumerate(splits)]
    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    write_images(images, entries)
    return write_json(root / "dataset_flickr8k.json", "flickr8k", entries), images


def karpathy_args(json_path: Path, images: Path, out: Path | str, *extra: str) -> list[str]:
    """The command line of a ``storage.build karpathy`` run on the random ResNet."""
    return [
        "karpathy", "--json", str(json_path), "--images", str(images), "--out", str(out),
        *RESNET, *extra,
    ]  # fmt: skip


def image_name(k: int) -> str:
    """The file name ``flickr_entry(k, ...)`` gives its image."""
    return flickr_entry(k, "train")["filename"]


def write_jpeg(path: Path, shade: int = 90) -> None:
    Image.new("RGB", (24, 20), (shade, 40, 200)).save(path, format="JPEG")
