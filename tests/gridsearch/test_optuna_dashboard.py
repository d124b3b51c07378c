"""optuna-dashboard on a real search's study, checked in headless Chromium: the command
the search prints at its end starts a dashboard whose JSON API lists the study with its
trials, and whose page, rendered by Chromium, shows the study's name. Skipped where
Chromium or optuna-dashboard is not installed (`pip install -e ".[dashboard]"`)."""

from __future__ import annotations

import json
import shlex
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from gridsearch.run import main
from tests.gridsearch.test_run import SMOKE

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DASHBOARD = shutil.which("optuna-dashboard")
EXPERIMENT = "dash-margins-7q"  # a name nothing else on the page could spell

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        DASHBOARD is None,
        reason="optuna-dashboard is not installed (pip install -e '.[dashboard]')",
    ),
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium to render the dashboard headless"),
]


class Dashboard(NamedTuple):
    url: str
    command: list[str]  # what the search printed, as run


@pytest.fixture(scope="module")
def dashboard(
    tmp_path_factory: pytest.TempPathFactory, on_cluster: list[str]
) -> Iterator[Dashboard]:
    """A two-trial search, then the optuna-dashboard command its closing lines print,
    serving on a free local port."""
    runs = tmp_path_factory.mktemp("runs")
    argv = ["--space", "margin_sweep", *SMOKE, "--num-samples", "2", "--runs-dir", str(runs)]
    lines = _printed(lambda: main([*argv, "--experiment", EXPERIMENT, *on_cluster]))
    printed = next(line for line in lines if line.startswith("its Optuna study:  "))
    command = shlex.split(printed.split(":  ", 1)[1])
    assert command[0] == "optuna-dashboard"
    port = _free_port()
    server = subprocess.Popen(
        [*command, "--host", "127.0.0.1", "--port", str(port), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_for(f"{url}/api/studies", server)
        yield Dashboard(url, command)
    finally:
        server.terminate()
        server.wait(timeout=30)


def _printed(run) -> list[str]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert run() == 0
    return out.getvalue().splitlines()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for(url: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if server.poll() is not None:
            error = server.stderr.read() if server.stderr else b""
            raise AssertionError(f"optuna-dashboard exited: {error[-2000:]!r}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.5)
    raise AssertionError(f"optuna-dashboard did not answer at {url}")


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def test_the_api_lists_the_study_with_its_trials(dashboard: Dashboard) -> None:
    assert dashboard.command[1].startswith("sqlite:////") and dashboard.command[1].endswith(
        f"/tune/{EXPERIMENT}.optuna.db"
    )
    studies = _get(f"{dashboard.url}/api/studies")["study_summaries"]
    assert [s["study_name"] for s in studies] == [EXPERIMENT]
    assert studies[0]["directions"] == ["maximize"]
    detail = _get(f"{dashboard.url}/api/studies/{studies[0]['study_id']}")
    assert detail["name"] == EXPERIMENT
    trials = [(t["number"], t["state"]) for t in detail["trials"]]
    assert trials == [(0, "Complete"), (1, "Complete")]
    assert {p["name"] for t in detail["trials"] for p in t["params"]} >= {"margin"}


def test_headless_chromium_shows_the_study(dashboard: Dashboard, tmp_path: Path) -> None:
    assert CHROMIUM is not None
    rendered = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
         f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", f"{dashboard.url}/dashboard"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr[-2000:]
    assert "Optuna Dashboard" in rendered.stdout
    assert EXPERIMENT in rendered.stdout  # the study list, drawn by the page's JavaScript
