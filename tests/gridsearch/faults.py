"""What the fault tests drive: the real CLI in a subprocess, a real ``mlflow server``, the
processes of a simulated multi-node Ray cluster, and a trainable that fails on purpose."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    from trainables.data import TrainingData

REPO = Path(__file__).resolve().parents[2]


class Driver:
    """``python -m gridsearch.run ARGS`` in a subprocess, its output read as it comes."""

    def __init__(self, args: list[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gridsearch.run", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line)
        self._queue.put(None)

    @property
    def text(self) -> str:
        self._drain()
        return "".join(self.lines)

    def _drain(self) -> bool:
        """Take what has arrived; False once the output has ended."""
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                return True
            if line is None:
                self._queue.put(None)
                return False
            self.lines.append(line)

    def wait_for(self, needle: str, timeout: float = 300, count: int = 1) -> None:
        """Until ``needle`` has appeared in ``count`` lines of the output."""
        deadline = time.monotonic() + timeout
        while sum(needle in line for line in self.lines) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"no {needle!r} after {timeout} s:\n{self.text}")
            try:
                line = self._queue.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"the driver ended before {needle!r}:\n{self.text}")
            self.lines.append(line)

    def finish(self, timeout: float = 600) -> int:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(
                f"the driver did not finish in {timeout} s:\n{self.text}"
            ) from None
        deadline = time.monotonic() + 10
        while self._drain() and time.monotonic() < deadline:
            time.sleep(0.05)
        return code


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MlflowServer:
    """A real ``mlflow server`` on localhost (sqlite backend, proxied artifacts) that a
    test can stop and start again on the same port and database."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        log = open(self.folder / "server.log", "ab")  # noqa: SIM115 (the server keeps it)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--backend-store-uri",
                f"sqlite:///{self.folder / 'mlflow.db'}",
                "--artifacts-destination",
                str(self.folder / "artifacts"),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
            start_new_session=True,  # its own process group, so stop() takes all of it
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2):
                    return
            except OSError:
                time.sleep(0.25)
        self.stop()
        raise AssertionError(f"mlflow server did not start:\n{self.log()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None

    def log(self) -> str:
        return (self.folder / "server.log").read_text(errors="replace")


def node_running(nodes: list, marker: str = "ImplicitFunc") -> object:
    """The node (of ``ray.cluster_utils.Cluster``) whose raylet started the process of
    a running trial (Ray titles it ``ray::ImplicitFunc...``)."""
    trials = [
        p
        for p in psutil.process_iter(["cmdline"])
        if any(marker in part for part in (p.info["cmdline"] or []))
    ]
    ancestors = {parent.pid for p in trials for parent in p.parents()}
    for node in nodes:
        raylet = node.all_processes["raylet"][0].process.pid
        if raylet in ancestors:
            return node
    raise AssertionError(f"no trial process found under the nodes' raylets ({trials})")


def fault_trainable(config: dict[str, Any], data: TrainingData, poisoned: TrainingData) -> None:
    """The real trainable; ``fault`` picks real NaN features (the real Trainer then
    stops on a non-finite loss) or an exception after any epoch but the untrained one.
    Here, not in the test module: a trial process imports the module of its trainable,
    and the test module's imports (MLflow, Optuna, the driver) cost it about 1.4 CPU-s."""
    from trainables.tune import trial

    config = dict(config)  # Tune records the dict it passed in: leave it whole
    fault = config.pop("fault")
    if fault == "raise":
        import ray.tune as ray_tune

        real_report = ray_tune.report

        def report(metrics: dict[str, Any], checkpoint: Any = None) -> None:
            # fails instead of the last epoch's report, on every attempt (the retry's too):
            # the report before it had a whole epoch to reach the driver (raising right
            # after a report races Tune's delivery of it)
            if metrics.get("epoch", 0) >= 2:
                raise RuntimeError("injected failure after an epoch")
            real_report(metrics, checkpoint=checkpoint)

        ray_tune.report = report
    trial(config, poisoned if fault == "nan" else data)
