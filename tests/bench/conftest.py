"""The bench tests' shared store; every script is imported as ``bench.<name>``."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="session")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 120-image embedded world (96 training images), built once for the bench tests
    that only read it."""
    from bench import _common

    return _common.world(None, 120, scratch=str(tmp_path_factory.mktemp("world")))
