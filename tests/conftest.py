"""Shared by every test package: the C++ recurrence built (once per key, in the user's
cache, as a search's driver builds it), a tiny embedded world, built once per test session
through the real build path, and one local Ray cluster per test process that the real
searches join."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storage.build import build_synthetic


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules with the most slow test functions first (ties and the rest in their
    order): under ``--dist loadscope`` a module runs whole on one worker, and a long one
    started last would leave the other workers idle at the end. xdist keeps this order only
    with ``--no-loadscope-reorder`` (pyproject's addopts); by default it starts the modules
    with the most tests first, which put the fault tests' 5 minutes after 88% of the tests."""
    functions = {
        (item.module, item.originalname) for item in items if item.get_closest_marker("slow")
    }  # type: ignore[attr-defined]
    slow = Counter(module for module, _ in functions)
    items.sort(key=lambda item: -slow[item.module])  # type: ignore[attr-defined]


@pytest.fixture(scope="session", autouse=True)
def cpp_recurrence() -> None:
    """Every test process trains with the C++ loop, as trials do after their driver built
    it: built once per key on this machine (the first run; the workers of a parallel run
    wait for the one that builds), found in the cache after that. A trial or a model load
    never builds it (tests/trainables/test_packed_rnn_cpp.py)."""
    from trainables import prebuild_cpp_loop

    prebuild_cpp_loop()


@pytest.fixture(scope="session", autouse=True)
def migrated_mlflow_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A new SQLite MLflow store in this process starts as a copy of the first one, which
    MLflow created and migrated itself: it runs its 50-odd Alembic migrations for every
    new store, 1.5 s of CPU each. The copy is SQLite's own backup of that result (schema,
    indexes and Alembic's revision), so every store is the one MLflow would have made. The
    CLIs that tests start as processes of their own still migrate theirs."""
    import sqlite3
    import threading

    import mlflow.store.db.utils as db_utils
    import mlflow.store.model_registry.sqlalchemy_store as registry_store

    template = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    migrate = db_utils._initialize_tables
    lock = threading.Lock()  # a driver's threads may open stores at once

    def from_template(engine: Any) -> None:
        if engine.url.get_backend_name() != "sqlite" or not engine.url.database:
            return migrate(engine)
        with lock:
            first = not template.exists()
            if first:
                migrate(engine)
            connection = engine.raw_connection()
            try:
                if first:  # every table of both stores (tracking, registry) is made at once;
                    # kept whole or not at all (a backup cut short leaves no template)
                    part = template.with_suffix(".part")
                    with contextlib.closing(sqlite3.connect(part)) as copy:
                        connection.driver_connection.backup(copy)
                    part.replace(template)
                else:
                    with contextlib.closing(sqlite3.connect(template)) as copy:
                        copy.backup(connection.driver_connection)
            finally:
                connection.close()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(db_utils, "_initialize_tables", from_template)
        patch.setattr(registry_store, "_initialize_tables", from_template)
        yield


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("world") / "store"
    build_synthetic(out, images=120, seed=0)
    return out


@pytest.fixture(scope="session")
def ray_address() -> Iterator[str]:
    """The address of one real local Ray cluster (a head node with two CPUs, as the CI
    machine has) kept for the test process: a search joins it with ``--address`` instead of
    starting and stopping a Ray of its own, which saves about 3.5 s and a fifth of the CPU
    of a smoke search. The searches that test Ray's own start (the default local cluster)
    or several nodes start their own.

    No log monitor: every driver joins with ``log_to_driver=False`` (``gridsearch.cluster``),
    so nothing reads what it forwards, and it scans the session's log folder twice a second,
    a folder that grows by every worker's logs: it took 45 CPU-s of a whole run's two
    clusters (a per-process profile, load 7-18)."""
    from ray.cluster_utils import Cluster

    head = {"num_cpus": 2, "include_dashboard": False, "include_log_monitor": False}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    yield cluster.address
    cluster.shutdown()


@pytest.fixture(scope="session")
def on_cluster(ray_address: str) -> list[str]:
    """The flags that send a search (``gridsearch.run``) to the session's Ray cluster."""
    return ["--address", ray_address]
