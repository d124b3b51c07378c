"""The test suite's two tiers timed (BENCHMARKS.md, "The test suite's time"): the fast tier
a developer runs after each change and the whole suite CI runs, each as README gives it.

    python bench/bench_test_tiers.py                 # both tiers, one after the other
    python bench/bench_test_tiers.py --tier fast     # python -m pytest -m "not slow"

Each tier runs as its own ``python -m pytest`` in a subprocess from the repository root
(pyproject's addopts: ``-n auto`` workers), with the machine's cores and its load average
before and after printed beside the wall time, the tests passed, failed and skipped, and
the slowest tests pytest reports. Goals: the fast tier within 180 s, the whole suite within
the 15 minutes CI allows with its fresh install (about 2 minutes of it, ``.ci/run``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

if not __package__:  # run as a file: the repository first on sys.path (see bench/__init__.py)
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench._cli import entry, parser

REPO = Path(__file__).resolve().parents[1]
TIERS = {  # name -> (pytest's arguments, goal in seconds)
    "fast": (["-m", "not slow"], 180.0),
    "whole": ([], 13 * 60.0),  # 15 minutes of CI less its install
}


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


@dataclass(frozen=True)
class TierRun:
    tier: str
    wall: float  # seconds
    status: int  # pytest's exit status
    counts: dict[str, int]  # passed, failed, skipped, errors
    load: tuple[str, str]  # the load averages before and after
    slowest: list[str]  # pytest's --durations lines, slowest first


def run_tier(name: str, extra: Sequence[str]) -> TierRun:
    """``python -m pytest`` of the tier: its wall time, counts and slowest tests."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TIERS[name][0]]
    before = _load()
    started = time.perf_counter()
    done = subprocess.run([*command, *extra], cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - started
    lines = done.stdout.strip().splitlines() or [done.stderr[-300:]]
    counts = {
        word: int(number)
        for number, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)", lines[-1])
    }
    slowest = [line for line in lines if re.match(r"[\d.]+s (call|setup|teardown) ", line)]
    return TierRun(name, wall, done.returncode, counts, (before, _load()), slowest[:5])


@entry
def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--tier", choices=("fast", "whole", "both"), default="both",
                   help="which tier to time")  # fmt: skip
    p.add_argument("pytest_args", nargs="*", help="more arguments for pytest (after --)")
    args = p.parse_args(argv)
    names = ["fast", "whole"] if args.tier == "both" else [args.tier]
    print(f"{os.cpu_count()} cores; Python {sys.version.split()[0]}; {REPO}")
    status = 0
    for name in names:
        run = run_tier(name, args.pytest_args)
        goal = TIERS[name][1]
        counts = ", ".join(f"{v} {k}" for k, v in run.counts.items())
        print(f"{name}: {run.wall:.0f} s ({run.wall / goal:.2f} of the {goal:.0f} s goal), "
              f"{counts}, exit {run.status}; load {run.load[0]} before, {run.load[1]} "
              "after")  # fmt: skip
        for line in run.slowest:
            print(f"  {line}")
        status = status or run.status
    return status


if __name__ == "__main__":
    raise SystemExit(main())
