"""Library code runs without Ray and MLflow: import it with both blocked."""

from __future__ import annotations

import subprocess
import sys

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
    "trainables.encode",
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
    "gridsearch._tags",
    "gridsearch._outcome",
    "gridsearch._store",
    "gridsearch.settings",
    "gridsearch.spaces",
    "gridsearch.summary",
    "gridsearch.curves",
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
