"""The search's inputs: the embedded world is built once per runs directory and reused
after, saying so, and saying when the generator that built it is not this code's."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import storage.synthetic
from gridsearch._inputs import _world
from gridsearch._layout import RunsLayout
from gridsearch._voice import Voice
from storage import build_synthetic
from storage.synthetic import GENERATOR_VERSION


@pytest.mark.parametrize("generator", [GENERATOR_VERSION, "0"])
def test_a_reused_world_says_when_an_older_generator_built_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, generator: str
) -> None:
    settings = SimpleNamespace(layout=RunsLayout.at(tmp_path), smoke_test=False)
    with monkeypatch.context() as patch:  # a store as that generator's version records it
        patch.setattr(storage.synthetic, "GENERATOR_VERSION", generator)
        build_synthetic(settings.layout.world(), images=10)
    lines: list[str] = []
    assert _world(settings, Voice(lines.append)) == str(tmp_path / "world")  # type: ignore[arg-type]
    [line] = lines
    assert line.endswith(f"data: the embedded world in {tmp_path / 'world'} (built earlier, reused)"
                         if generator == GENERATOR_VERSION else
                         f"(built earlier, reused; its generator is version 0, this code's "
                         f"{GENERATOR_VERSION}, whose world a new --runs-dir builds)")  # fmt: skip
