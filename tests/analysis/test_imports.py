"""The analysis package's modules import each other without a cycle, and none imports a
CLI (``analysis.compare``, ``analysis.report``): what both CLIs share lives in library
modules they import. Every import counts, those under TYPE_CHECKING and inside
functions too."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_boundaries import _cycle

PACKAGE = Path(__file__).resolve().parents[2] / "analysis"
CLIS = {"analysis.compare", "analysis.report"}


def _imports() -> dict[str, set[str]]:
    """module -> the analysis modules it imports (``from analysis import _x`` as
    ``analysis._x``)."""
    modules = {f"analysis.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.glob("*.py"):
        name = "analysis" if path.stem == "__init__" else f"analysis.{path.stem}"
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def test_the_analysis_modules_import_each_other_without_a_cycle() -> None:
    graph = _imports()
    assert graph["analysis._sections"], "the walk found no imports: it is broken"
    assert _cycle(graph) == []


def test_no_module_imports_a_cli() -> None:
    graph = _imports()
    importers = {m: sorted(targets & CLIS) for m, targets in graph.items() if targets & CLIS}
    assert importers == {}
