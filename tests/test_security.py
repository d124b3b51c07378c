"""Rules every module of the four packages keeps, checked on their source (AST):
checkpoints load with ``weights_only=True``; no shell runs, and no command is a string;
YAML is parsed safely; nothing is unpickled or evaluated from a file."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gridsearch.settings import parse_args

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(
    path
    for package in ("gridsearch", "trainables", "storage", "analysis")
    for path in (ROOT / package).rglob("*.py")
)


def _calls(path: Path) -> list[tuple[str, ast.Call]]:
    calls = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            calls.append((ast.unparse(node.func), node))
    return calls


def _keyword(call: ast.Call, name: str) -> object:
    for keyword in call.keywords:
        if keyword.arg == name and isinstance(keyword.value, ast.Constant):
            return keyword.value.value
    return None


def test_the_scan_sees_the_packages() -> None:
    assert len(SOURCES) > 40
    loads = [c for p in SOURCES for name, c in _calls(p) if name == "torch.load"]
    # the rule below is not vacuous: trainables/checkpoint.py reads every checkpoint and
    # ensemble, storage/features.py the ResNet weights
    assert len(loads) >= 2


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_source_rules(path: Path) -> None:
    for name, call in _calls(path):
        where = f"{path.relative_to(ROOT)}:{call.lineno}"
        if name == "torch.load":
            assert _keyword(call, "weights_only") is True, f"{where}: weights_only=True"
        if name.startswith("subprocess."):
            assert _keyword(call, "shell") in (None, False), f"{where}: shell=True"
            assert call.args and isinstance(call.args[0], ast.List), (
                f"{where}: a command is a list of arguments, never a string"
            )
        assert name not in ("os.system", "os.popen", "eval", "exec"), where
        assert name not in ("yaml.load", "yaml.unsafe_load", "yaml.full_load"), where
        assert name not in ("pickle.load", "pickle.loads", "torch.jit.load"), where


def test_dashboard_listens_on_localhost_unless_told() -> None:
    assert parse_args(["--space", "margin_sweep"]).dashboard_host == "127.0.0.1"
    assert parse_args(["--dashboard-host", "0.0.0.0"]).dashboard_host == "0.0.0.0"
