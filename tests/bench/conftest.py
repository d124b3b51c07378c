"""The bench scripts are plain files under ``bench/``, not a package: put that folder on
``sys.path`` so the tests import them as the scripts import each other."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
