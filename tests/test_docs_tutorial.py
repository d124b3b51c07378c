"""docs/getting-started.md's commands run as a reader would type them, in order, in an
empty folder: every ```bash block on the page, except those the line before marks
``<!-- not run by the tests: WHY -->``. The search joins the test session's Ray cluster
(``--address``), as every search of the tests does. What the search printed is read for
its timestamps: no silence longer than ``HEARD_EVERY_S`` from the process's start to its
end, and "finished in N s" the wall time the test measured."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gridsearch._voice import HEARD_EVERY_S

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "getting-started.md"
BLOCK = re.compile(
    r"(?P<skip><!-- not run by the tests: (?P<why>[^>]*?) -->\n)?```bash\n(?P<body>.*?)\n```",
    re.DOTALL,
)
SEARCH = "python -m gridsearch.run"


def blocks() -> list[tuple[str, str | None]]:
    """(commands, why they are not run, or None) for each bash block of the page."""
    return [(m["body"], m["why"]) for m in BLOCK.finditer(PAGE.read_text(encoding="utf-8"))]


def test_the_tutorial_runs_a_search_and_says_why_it_skips_a_block() -> None:
    run = [body for body, why in blocks() if why is None]
    assert any(body.startswith(SEARCH) for body in run)
    assert all(why.strip() for _, why in blocks() if why is not None)
    assert len(run) >= 3


@pytest.mark.slow
def test_the_tutorial_commands_run(tmp_path: Path, on_cluster: list[str]) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    outputs = []
    for body, why in blocks():
        if why is not None:
            continue
        command = body.replace(SEARCH, f"{SEARCH} {' '.join(on_cluster)}")
        began = time.monotonic()
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        wall_s = time.monotonic() - began
        said = f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        assert result.returncode == 0, f"{command}\n{said}"
        outputs.append(result.stdout)
        if body.startswith(SEARCH):
            check_heard(result.stdout, wall_s)
    assert (tmp_path / "runs" / "reports" / "first-search" / "report.html").is_file()
    vector = outputs[-1].split()  # the sentence the registered model embedded
    assert len(vector) == 16 and all(float(x) == float(x) for x in vector)  # smoke: n = 8, 2n


STAMP = re.compile(r"^\[\s*(?:(\d+):)?(\d+):(\d\d)\] ", re.MULTILINE)


def check_heard(out: str, wall_s: float) -> None:
    """A search's output (``out``, of a process that ran ``wall_s``): every stamped line
    within ``HEARD_EVERY_S`` of the one before, the first of the process's start and the
    last of its end (the summary that follows it takes no time); and its "finished in N
    s" the wall time, to the second it is rounded to and the second Python takes to
    start (the stamps count from the process's start, the wall time from bash's)."""
    stamps = [int(h or 0) * 3600 + int(m) * 60 + int(s) for h, m, s in STAMP.findall(out)]
    assert len(stamps) >= 10, out
    gaps = [b - a for a, b in zip([0, *stamps], [*stamps, wall_s], strict=True)]
    # the stamps are whole seconds: a gap they show may be up to 1 s longer than it was
    assert max(gaps) <= HEARD_EVERY_S + 1, (gaps, out)
    (finished,) = re.findall(r"^finished in (\d+) s ", out, re.MULTILINE)
    assert wall_s - 1.5 <= int(finished) <= wall_s + 0.5, (finished, wall_s)
