"""Shared by every test package: a tiny embedded world, built once per test session
through the real build path."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.build import build_synthetic


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("world") / "store"
    build_synthetic(out, images=120, seed=0)
    return out
