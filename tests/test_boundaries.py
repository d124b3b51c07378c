"""Library code runs without Ray and MLflow: import it with both blocked."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

LIBRARY_MODULES = [
    "storage",
    "storage.build",
    "storage.inspect",
    "storage.features",
    "storage.senteval",
    "storage.synthetic",
    "trainables.model",
    "trainables.loss",
    "trainables.schedule",
    "trainables.metrics",
    "trainables.names",
    "trainables.device",
    "trainables.relatedness",
    "trainables.stats",
    "trainables.checkpoint",
    "trainables.embedding",
    "trainables.semantic",
    "trainables.data",
    "trainables.loop",
    "trainables.train",
    "trainables.baselines",
    "trainables.encoder",
    "trainables.fused",
    "trainables.encode",
    "trainables.cpp_loop",
    "storage.cli",
]


def test_library_imports_neither_ray_nor_mlflow() -> None:
    code = (
        "import sys\n"
        "sys.modules['ray'] = None\n"
        "sys.modules['mlflow'] = None\n"
        f"for name in {LIBRARY_MODULES!r}:\n"
        "    __import__(name)\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


# Reading a finished search (the report, the analysis API) and the search's settings,
# spaces and MLflow layout need neither Ray nor torch: only the driver and the trainable do.
READING_A_SEARCH = [
    "analysis",
    "analysis.report",
    "gridsearch._layout",
    "gridsearch._outcome",
    "gridsearch.tracking",
    "gridsearch.tracking._tags",
    "gridsearch.tracking._store",
    "gridsearch.tracking._curves",
    "gridsearch.settings",
    "gridsearch.spaces",
    "gridsearch.summary",
    "trainables.stats",
]


def test_reading_a_search_imports_neither_ray_nor_torch() -> None:
    code = (
        "import sys\n"
        f"for name in {READING_A_SEARCH!r}:\n"
        "    __import__(name)\n"
        "print(sorted(m for m in ('ray', 'torch') if m in sys.modules) or 'ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_blocking_works() -> None:
    code = "import sys\nsys.modules['ray'] = None\nimport trainables.tune\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode != 0 and "ray" in result.stderr


# -- the import graph: packages meet at their public faces, and only downwards ----------

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("storage", "trainables", "gridsearch", "analysis")
FLOOR = {"storage": 0, "trainables": 1, "gridsearch": 2, "analysis": 3}
# Known upward arrows, each to be removed (a test that fails when a new one appears). None
# left: SentenceEncoder.load finds analysis.models' lookup through an entry point.
UPWARD_ALLOWED: set[tuple[str, str]] = set()
# Known reaches into a private module, likewise: none.
PRIVATE_ALLOWED: set[tuple[str, str]] = set()


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports, absolute names (``from x import y`` gives x.y too,
    so that a private module reached through its package is seen)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
            found += [f"{node.module}.{alias.name}" for alias in node.names]
    return found


def _sources(*tops: str) -> list[Path]:
    return sorted(p for top in tops for p in (ROOT / top).rglob("*.py"))


def test_no_package_reaches_into_another_packages_private_modules() -> None:
    offenders = []
    for path in _sources(*PACKAGES, "bench", "docs"):
        own = path.relative_to(ROOT).parts[0]
        for name in _imports(path):
            parts = name.split(".")
            private = any(part.startswith("_") and part != "__future__" for part in parts[1:])
            where = (str(path.relative_to(ROOT)), name)
            if (
                parts[0] in PACKAGES
                and parts[0] != own
                and private
                and where not in PRIVATE_ALLOWED
            ):
                offenders.append(f"{path.relative_to(ROOT)}: {name}")
    assert offenders == [], "\n".join(offenders)


def test_imports_only_run_down_the_floors() -> None:
    upward = []
    for path in _sources(*PACKAGES):
        own = path.relative_to(ROOT).parts[0]
        for name in _imports(path):
            top = name.split(".")[0]
            if top in FLOOR and FLOOR[top] > FLOOR[own]:
                where = (str(path.relative_to(ROOT)), name)
                if where not in UPWARD_ALLOWED and (where[0], name.rsplit(".", 1)[0]) not in (
                    UPWARD_ALLOWED
                ):
                    upward.append(f"{where[0]}: {name}")
    assert upward == [], "\n".join(upward)


def test_the_public_faces_resolve_and_list_what_they_export() -> None:
    code = (
        "import sys\n"
        "sys.modules['ray'] = None\n"
        "import gridsearch, storage, trainables\n"
        "SEARCHING = {'SpaceFillingSampler', 'make_sampler', 'searcher', 'make_scheduler',"
        " 'ResumableOptunaSearch',"
        " 'resolve_scheduler', 'warm_start', 'quiet'}\n"
        "for package in (storage, gridsearch):\n"
        "    for name in package.__all__:\n"
        "        if name not in SEARCHING:\n"
        "            getattr(package, name)\n"
        "assert 'torch' not in sys.modules, 'the faces imported torch'\n"
        "print('ok')\n"
    )
    assert _python(code) == "ok"


@pytest.mark.slow  # 5 s or more in the fast tier (BENCHMARKS.md)
def test_loading_a_model_by_run_imports_neither_cli() -> None:
    # SentenceEncoder.load("models:/..." or a run id) goes through analysis.models, which
    # once imported the compare CLI (and, through it, the report)
    code = (
        "import sys\n"
        "import analysis.models\n"
        "print(sorted(m for m in ('analysis.compare', 'analysis.report') if m in sys.modules))\n"
    )
    assert _python(code) == "[]"


def _python(code: str) -> str:
    """What a fresh interpreter running ``code`` in the repository prints (it must exit 0)."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_model_library_finds_its_tracking_lookup_through_an_entry_point() -> None:
    """SentenceEncoder.load("models:/...") reaches analysis.models without importing it:
    the installed package's metadata names it (pyproject.toml's entry point)."""
    from importlib.metadata import entry_points

    from analysis.models import fetch_ensemble
    from trainables.encoder import MODEL_SOURCES

    (point,) = entry_points(group=MODEL_SOURCES)
    assert point.load() is fetch_ensemble


# -- no circles: a module never needs, at run time, a module that needs it ----------------

CLIS = {
    "analysis.compare",
    "analysis.report",
    "gridsearch.run",
    "storage.build",
    "trainables.cpp_loop",
    "trainables.encode",
    "trainables.train",
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def _runtime_imports(path: Path, types: bool = False) -> set[str]:
    """What ``path`` imports when it runs, in a function too; imports under ``if
    TYPE_CHECKING:`` (types only) are left out unless ``types``."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if not types and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for child in node.body
        for inner in ast.walk(child)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _lazy_names(path: Path) -> dict[str, str]:
    """A lazy face's names (an ``__init__`` with a module ``__getattr__`` that imports each
    name on first use, typed under ``if TYPE_CHECKING:``): name -> the module it comes from."""
    tree = ast.parse(path.read_text(), str(path))
    if not any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body):
        return {}
    return {
        alias.asname or alias.name: child.module
        for node in tree.body
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for child in node.body
        if isinstance(child, ast.ImportFrom) and child.module and child.level == 0
        for alias in child.names
    }


def _graph(types: bool = False) -> dict[str, set[str]]:
    """module -> the project modules it imports at run time (``types``: for its type
    hints too); a module's use of its own package's face (``from trainables import
    names``) counts as the module it names, and a name taken from a lazy face (``from
    gridsearch.tracking import TrialTracker``) as the module the face imports it from."""
    paths = {_module_name(p): p for p in _sources(*PACKAGES)}
    faces = {m: _lazy_names(p) for m, p in paths.items() if p.name == "__init__.py"}

    def home(imported: str) -> str:
        while imported not in paths and "." in imported:
            face, name = imported.rsplit(".", 1)
            found = faces.get(face, {}).get(name)
            if found is None:
                break
            imported = f"{found}.{name}" if faces.get(found) else found
        return imported

    graph = {}
    for name, path in paths.items():
        own = name.split(".")[0]
        found = {home(m) for m in _runtime_imports(path, types)}
        graph[name] = {m for m in found if m in paths and m not in (name, own)}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` (the modules along it), or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        state[node] = 2
        path.pop()
        return []

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return []


def test_no_module_imports_one_that_imports_it() -> None:
    graph = _graph()
    assert graph["gridsearch.driver"], "the walk found no imports: it is broken"
    # a name from a lazy face is an arrow to the module the face takes it from
    assert "gridsearch.tracking._callback" in graph["gridsearch._search_setup"]
    assert _cycle(graph) == []


def test_no_subpackage_imports_a_module_that_imports_it() -> None:
    """A subpackage is one floor: what its modules import never imports one of them back
    (no circle through a lazy face either, such as tracking's and the interruption's)."""
    graph = _graph()
    subpackages = {_module_name(p) for p in _sources(*PACKAGES) if p.name == "__init__.py"} - set(
        PACKAGES
    )
    assert "gridsearch.tracking" in subpackages

    def node(module: str) -> str:
        return next((s for s in subpackages if module.startswith(f"{s}.")), module)

    collapsed: dict[str, set[str]] = {}
    for module, targets in graph.items():
        collapsed.setdefault(node(module), set()).update(
            node(t) for t in targets if node(t) != node(module)
        )
    assert "gridsearch.tracking" in collapsed["gridsearch._search_setup"]
    assert _cycle(collapsed) == []


def test_a_cycle_is_found_and_a_chain_is_not_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []
    assert _circles({"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": {"e"}, "e": {"d"}}) == [
        {"a", "b", "c"},
        {"d", "e"},
    ]
    assert _circles({"a": {"b"}, "b": set()}) == []


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Every circle of ``graph``: its strongly connected components of two modules or
    more (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while not component or node not in component:
                component.add(stack.pop())
            if len(component) > 1:
                found.append(component)

    for start in sorted(graph):
        if start not in index:
            visit(start)
    return sorted(found, key=sorted)


def test_no_module_imports_one_that_imports_it_not_even_for_its_types() -> None:
    """Type-only imports (under ``if TYPE_CHECKING:``) count too, in every package: a
    circle of them says a type sits in the wrong module (a type two modules share belongs
    in the lower one), and one step more makes it an import circle."""
    graph = _graph(types=True)
    # the type-only imports are read: the lazy face names its modules for types only
    assert "trainables.fused" in graph["trainables"]
    assert "trainables.fused" not in _graph()["trainables"]
    # the search's settings take their fields from the module below the command line
    assert "gridsearch._settings" in graph["gridsearch._resumed"]
    assert "gridsearch.settings" not in graph["gridsearch.spaces"]
    assert _circles(graph) == []


def test_no_module_imports_a_command_line() -> None:
    """What two commands share lives in a library module both import, never in one of
    them (``analysis.compare`` once held the comparison the report needs)."""
    importers = {m: sorted(targets & CLIS) for m, targets in _graph().items() if targets & CLIS}
    assert importers == {}


# -- rooms: every module one concern, every class of the model library a few -------------

MAX_MODULE_LINES = 400
# Modules over MAX_MODULE_LINES that are one concern, each saying so in the first lines
# of its docstring ("one concern").
ONE_CONCERN: set[str] = {
    "gridsearch.progress",
    "trainables.checkpoint",
    "trainables.config",
}
# Modules over MAX_MODULE_LINES that mix concerns, each to be split. A test fails when a
# new one appears, and when one listed here is under the limit (then take it off).
TO_SPLIT: set[str] = set()
MAX_CLASS_METHODS = 15
MAX_CLASS_LINES = 300


def _long_modules() -> dict[str, int]:
    """Every module of the four packages over ``MAX_MODULE_LINES``, with its lines."""
    found = {}
    for path in _sources(*PACKAGES):
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            found[_module_name(path)] = lines
    return found


def test_a_module_over_400_lines_is_one_concern_and_says_so() -> None:
    long = _long_modules()
    unlisted = {m: n for m, n in long.items() if m not in ONE_CONCERN | TO_SPLIT}
    assert unlisted == {}, "split these by concern, or say they are one (ONE_CONCERN)"
    assert sorted(ONE_CONCERN | TO_SPLIT) == sorted(long), "under the limit now: unlist"
    paths = {_module_name(p): p for p in _sources(*PACKAGES)}
    silent = []
    for module in sorted(ONE_CONCERN):
        docstring = ast.get_docstring(ast.parse(paths[module].read_text())) or ""
        if "one concern" not in " ".join(docstring.splitlines()[:6]).lower():
            silent.append(module)
    assert silent == [], "the docstring's first lines say why the module is one concern"


def _big_classes(source: str, where: str) -> list[str]:
    """The classes of ``source`` (the module at ``where``) over ``MAX_CLASS_METHODS``
    methods or ``MAX_CLASS_LINES`` lines (a nested class counted on its own)."""
    found = []
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.ClassDef):
            methods = sum(isinstance(c, ast.FunctionDef | ast.AsyncFunctionDef) for c in node.body)
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if methods > MAX_CLASS_METHODS or lines > MAX_CLASS_LINES:
                found.append(f"{where}: {node.name} ({methods} methods, {lines} lines)")
    return found


def test_no_class_of_trainables_over_15_methods_or_300_lines() -> None:
    classes = [
        found
        for path in _sources("trainables")
        for found in _big_classes(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert classes == []


def test_the_class_rule_sees_what_breaks_it() -> None:
    """A class of 16 methods and one of 301 lines are found; one of 15 methods is not."""
    many = "class Many:\n" + "".join(f"    def m{i}(self) -> None: ...\n" for i in range(16))
    long = "class Long:\n    x = 0\n" + "    y = 0\n" * 299
    fine = "class Fine:\n" + "".join(f"    def m{i}(self) -> None: ...\n" for i in range(15))
    found = [c for text in (many, long, fine) for c in _big_classes(text, "t.py")]
    assert found == ["t.py: Many (16 methods, 17 lines)", "t.py: Long (0 methods, 301 lines)"]
