"""The bench scripts are plain files under ``bench/``, not a package: put that folder on
``sys.path`` so the tests import them as the scripts import each other."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))


@pytest.fixture(scope="session")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 120-image embedded world (96 training images), built once for the bench tests
    that only read it."""
    import _common

    return _common.world(None, 120, scratch=str(tmp_path_factory.mktemp("world")))
