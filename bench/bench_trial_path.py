"""A search on today's trial path against the same search at an earlier revision, in one
run on this machine (BENCHMARKS.md, "One trial path"): a lone trial must lose nothing by
being a group of one.

    python bench/bench_trial_path.py --baseline 94b5afc            # 3 timed searches each
    python bench/bench_trial_path.py --baseline 94b5afc --repeats 1 --num-samples 4

Each side runs ``python -m gridsearch.run --space margin_sweep --smoke-test --quiet``
(a local Ray, the embedded world) in a subprocess, the two sides alternating; the
baseline's tree is ``git archive REV`` in a temporary folder, first on ``PYTHONPATH`` (Ray
hands the driver's path to its trial workers). Each side first runs one untimed search
that builds its world and its extension. Printed: each side's wall times, their median
ratio (today / baseline) with the load before and after, and whether the two summaries
name the same numbers (the same seeds train the same models on a CPU).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

if not __package__:  # run as a file: the repository first on sys.path (see bench/__init__.py)
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench._cli import BadInput, entry, parser

REPO = Path(__file__).resolve().parents[1]
_ID = re.compile(r"\b[0-9a-f]{8}(-m\d+)?\b")  # a Tune trial id differs between runs


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _export(rev: str, into: Path) -> Path:
    """The tree of ``rev`` (a commit of this repository) unpacked into ``into``."""
    archive = into / "tree.tar"
    done = subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), rev],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode:
        raise BadInput(f"error: --baseline {rev}: not a revision of {REPO} ({done.stderr.strip()})")
    tree = into / "tree"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def _search(tree: Path, runs: Path, experiment: str, more: Sequence[str]) -> tuple[float, str]:
    """One search with the code of ``tree``: its wall time and its summary, ids removed."""
    command = [sys.executable, "-m", "gridsearch.run", "--space", "margin_sweep",
               "--smoke-test", "--no-dashboard", "--quiet", "--runs-dir", str(runs),
               "--experiment", experiment, *more]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"error: the search in {tree} failed:\n{done.stdout}{done.stderr}")
    return wall, _ID.sub("ID", done.stdout.strip())


@entry
def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--baseline", required=True, help="the revision to compare against")
    p.add_argument("--repeats", type=int, default=3, help="timed searches per side")
    p.add_argument("--num-samples", type=int, default=2, help="trials per search")
    args = p.parse_args(argv)
    if args.repeats < 1 or args.num_samples < 1:
        raise BadInput("error: --repeats and --num-samples: expected at least 1")
    more = ["--num-samples", str(args.num_samples)]
    with tempfile.TemporaryDirectory() as tmp:
        sides = {"baseline": _export(args.baseline, Path(tmp)), "today": REPO}
        print(f"{os.cpu_count()} cores; {args.num_samples} smoke trials per search; "
              f"baseline {args.baseline}; load {_load()}")  # fmt: skip
        walls: dict[str, list[float]] = {side: [] for side in sides}
        summaries: dict[str, str] = {}
        for repeat in range(args.repeats + 1):  # the first builds each side's world: untimed
            for side, tree in sides.items():
                wall, summaries[side] = _search(
                    tree, Path(tmp) / f"runs-{side}", f"r{repeat}", more
                )
                if repeat:
                    walls[side].append(wall)
        for side, times in walls.items():
            print(f"{side}: " + ", ".join(f"{t:.1f}" for t in times) + " s")
        ratio = statistics.median(walls["today"]) / statistics.median(walls["baseline"])
        print(f"today / baseline: {ratio:.2f} (median wall time); load {_load()}")
        same = summaries["today"] == summaries["baseline"]
        print("summaries: the same numbers" if same else "summaries differ:")
        if not same:
            for side, text in summaries.items():
                print(f"--- {side}\n{text}")
        return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
