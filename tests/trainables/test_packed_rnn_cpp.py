"""Building the C++ per-step loops: on first use, cached, and a Python fallback with one
warning when the machine cannot build them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trainables import _packed_rnn_cpp


def _child(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip


CHECK = """
    import warnings
    warnings.simplefilter("always")
    import torch
    from torch.nn.utils.rnn import pack_padded_sequence
    from trainables import _packed_rnn, _packed_rnn_cpp
    rnn = torch.nn.GRU(3, 4, bidirectional=True)
    packed = pack_padded_sequence(torch.randn(5, 2, 3), torch.tensor([5, 3]))
    out = _packed_rnn.packed_bidirectional(packed.data, packed.batch_sizes, rnn)
    out.sum().backward()
    print("built" if _packed_rnn_cpp.extension() is not None else "python",
          _packed_rnn._loop(None, packed.data))
"""


def test_the_extension_builds_here_and_is_the_default() -> None:
    assert _packed_rnn_cpp.extension() is not None  # this machine has a C++ compiler


@pytest.mark.slow
def test_without_a_compiler_training_falls_back_to_python_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path), "CXX": str(tmp_path / "no-cxx")}
    done = _child(CHECK, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["python", "python"]
    warned = [line for line in done.stderr.splitlines() if "could not be built" in line]
    assert len(warned) == 1 and "GROUNDED_PACKED_RNN=python" in warned[0]


def test_the_environment_variable_asks_for_the_python_loop_without_building(
    tmp_path: Path,
) -> None:
    import os

    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path), _packed_rnn_cpp.ENV: "python"}
    done = _child(CHECK, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["python", "python"]
    assert "could not be built" not in done.stderr
    assert not any(tmp_path.iterdir())  # nothing was built


def test_the_build_name_follows_the_source_and_the_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    name = _packed_rnn_cpp._name()
    assert name.startswith("grounded_packed_rnn_") and name == _packed_rnn_cpp._name()
    monkeypatch.setattr(_packed_rnn_cpp, "FLAGS", [*_packed_rnn_cpp.FLAGS, "-g"])
    assert _packed_rnn_cpp._name() != name
