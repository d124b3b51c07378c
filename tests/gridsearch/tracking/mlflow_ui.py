"""MLflow's own UI server on a tracking store, and headless Chromium to look at its pages:
for the UI tests and ``docs/screenshots.py``.

MLflow's UI is a JavaScript app. ``dump_dom`` and ``screenshot`` have Chromium render a
page for ``budget_ms`` of virtual time (which waits for pending requests) and then dump
its DOM or take a screenshot; ``Browser`` drives a Chromium through chromedriver (the W3C
WebDriver protocol, over HTTP: no client library), which can wait for what a page shows
and measure where it shows it.
"""

from __future__ import annotations

import base64
import contextlib
import html
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = [
    "Browser",
    "MlflowUI",
    "chromedriver",
    "chromium",
    "dump_dom",
    "runs_table",
    "screenshot",
    "visible_text",
]

WINDOW = (1920, 720)  # wide enough for every column of a search's results view


def chromium() -> str | None:
    """The Chromium executable, or None when there is none."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    return found or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


def chromedriver() -> str | None:
    """Chromium's WebDriver server (Debian's chromium-driver), or None."""
    return shutil.which("chromedriver")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class MlflowUI:
    """``mlflow ui`` on ``tracking_uri`` at a free local port, one worker and no job
    runner, for the duration of a ``with`` block; ``log`` receives its output."""

    def __init__(self, tracking_uri: str, log: Path, timeout_s: float = 180.0) -> None:
        self.tracking_uri, self.log, self.timeout_s = tracking_uri, log, timeout_s
        self.url = f"http://127.0.0.1:{_free_port()}"
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> MlflowUI:
        port = self.url.rsplit(":", 1)[1]
        command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri"]
        command += [self.tracking_uri, "--host", "127.0.0.1", "--port", port, "--workers", "1"]
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        with self.log.open("wb") as out:  # the child keeps its own copy of the descriptor
            self._process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                break
            try:
                self.api("experiments/search", {"max_results": 1})
                return self
            except (OSError, urllib.error.URLError):
                time.sleep(1)
        self.__exit__(None, None, None)
        output = self.log.read_text()[-2000:]
        raise RuntimeError(f"mlflow ui did not answer at {self.url}: {output}")

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._process is None:
            return
        try:  # its own process group: the server and the worker it started
            os.killpg(self._process.pid, signal.SIGTERM)
            self._process.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait(timeout=30)
        self._process = None

    def api(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """A REST call of the tracking API (``/api/2.0/mlflow/PATH``): GET with the
        ``body`` as query parameters when ``path`` ends in ``get``/``get-by-name``, else
        POST of it as JSON."""
        url = f"{self.url}/api/2.0/mlflow/{path}"
        if path.endswith(("/get", "/get-by-name")):
            query = "&".join(f"{k}={urllib.parse.quote(str(v))}" for k, v in (body or {}).items())
            request = urllib.request.Request(f"{url}?{query}")
        else:
            data = json.dumps(body or {}).encode()
            headers = {"Content-Type": "application/json"}
            request = urllib.request.Request(url, data=data, headers=headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            return dict(json.loads(response.read()))


def _chromium(
    args: list[str], budget_ms: int, window: tuple[int, int] = WINDOW
) -> subprocess.CompletedProcess[str]:
    executable = chromium()
    if executable is None:
        raise RuntimeError("no chromium on this machine")
    command = [executable, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars"]
    command += [f"--virtual-time-budget={budget_ms}", f"--window-size={window[0]},{window[1]}"]
    return subprocess.run(
        command + args, capture_output=True, text=True, timeout=budget_ms / 1000 + 120
    )


def dump_dom(url: str, budget_ms: int = 20_000) -> str:
    """The DOM of ``url`` once its scripts ran for ``budget_ms`` of virtual time."""
    return _chromium(["--dump-dom", url], budget_ms).stdout


def screenshot(
    url: str, path: Path, budget_ms: int = 20_000, window: tuple[int, int] = WINDOW
) -> Path:
    """A PNG of ``url`` in a ``window``-sized window."""
    done = _chromium([f"--screenshot={path}", url], budget_ms, window)
    if not path.exists():
        raise RuntimeError(f"chromium wrote no screenshot of {url}: {done.stderr[-2000:]}")
    return path


def visible_text(dom: str) -> str:
    """What a page says: its DOM without scripts, styles and tags, spaces collapsed."""
    text = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S)
    text = re.sub(r"<[^>]+>", " ", text)
    return re.sub(r"\s+", " ", html.unescape(text)).strip()


# HTML elements without an end tag (Chromium's DOM dump writes every other one closed)
_VOID = frozenset(
    {
        *("area", "base", "br", "col", "embed", "hr", "img"),
        *("input", "link", "meta", "source", "track", "wbr"),
    }
)


class _GridCells(HTMLParser):
    """The cells of MLflow's runs table (an ag-grid): ``role="row"`` elements carry the
    run id (``row-id``), ``role="gridcell"`` elements their column (``col-id``). A row is
    split over the grid's pinned and scrolling parts, each holding some of its cells."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, dict[str, str]] = {}
        self._stack: list[tuple[str, str | None, str | None]] = []  # (tag, row id, col id)
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        row = found.get("row-id") if found.get("role") == "row" else None
        column = found.get("col-id") if found.get("role") == "gridcell" else None
        if tag not in _VOID:
            self._stack.append((tag, row, column))
        if column is not None:
            self._text = []

    def handle_endtag(self, tag: str) -> None:
        if not self._stack:
            return
        _, _, column = self._stack.pop()
        if column is None:
            return
        row = next((r for _, r, _ in reversed(self._stack) if r), None)
        if row is not None:
            self.rows.setdefault(row, {})[column] = " ".join(" ".join(self._text).split())

    def handle_data(self, data: str) -> None:
        self._text.append(data)


def runs_table(dom: str) -> dict[str, dict[str, str]]:
    """The runs table of a dumped experiment page: run id -> column id (``metrics.`NAME```,
    ``params.`NAME```, ``tags.`NAME```, ``attributes.`Run Name```) -> the text shown."""
    parser = _GridCells()
    parser.feed(dom)
    return parser.rows


class Browser:
    """A headless Chromium of ``window`` pixels, driven through chromedriver for the
    duration of a ``with`` block: ``open`` a page, ``run`` JavaScript in it, ``wait_for``
    what it shows, take a ``screenshot``."""

    def __init__(self, window: tuple[int, int] = WINDOW, timeout_s: float = 60.0) -> None:
        self.window, self.timeout_s = window, timeout_s
        self.url = f"http://127.0.0.1:{_free_port()}"
        self._process: subprocess.Popen[bytes] | None = None
        self._session = ""

    def __enter__(self) -> Browser:
        driver, browser = chromedriver(), chromium()
        if driver is None or browser is None:
            raise RuntimeError("no chromium and chromedriver on this machine")
        port = self.url.rsplit(":", 1)[1]
        self._process = subprocess.Popen(
            [driver, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                self._call("GET", "/status")
                break
            except (OSError, urllib.error.URLError):
                if time.monotonic() > deadline or self._process.poll() is not None:
                    self.__exit__(None, None, None)
                    raise RuntimeError(f"chromedriver did not answer at {self.url}") from None
                time.sleep(0.1)
        width, height = self.window
        options = {
            "binary": browser,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                     f"--window-size={width},{height}"],
        }  # fmt: skip
        capabilities = {"browserName": "chrome", "goog:chromeOptions": options}
        found = self._call("POST", "/session", {"capabilities": {"alwaysMatch": capabilities}})
        self._session = str(found["sessionId"])
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._session:
            with contextlib.suppress(OSError, urllib.error.URLError):
                self._call("DELETE", f"/session/{self._session}")
            self._session = ""
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=30)
            self._process = None

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        request = urllib.request.Request(self.url + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s + 60) as response:
                return json.loads(response.read())["value"]
        except urllib.error.HTTPError as err:  # WebDriver's errors say what went wrong
            raise RuntimeError(f"{method} {path}: {err.read().decode()[:2000]}") from None

    def open(self, url: str) -> None:
        """Load ``url`` anew (after a blank page: MLflow's UI, one JavaScript app, would
        take another of its pages as a move within it and keep the earlier page's
        state)."""
        for page in ("about:blank", url):
            self._call("POST", f"/session/{self._session}/url", {"url": page})

    def run(self, script: str, *args: Any) -> Any:
        """The value of the JavaScript function body ``script`` (``arguments``: ``args``)."""
        body = {"script": script, "args": list(args)}
        return self._call("POST", f"/session/{self._session}/execute/sync", body)

    def wait_for(
        self,
        script: str,
        *args: Any,
        until: Callable[[Any], bool] = bool,
        timeout_s: float | None = None,
    ) -> Any:
        """The value of ``script`` (run every half second) once ``until`` holds for it; an
        error saying the last value after ``timeout_s`` (default: the browser's)."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            found = self.run(script, *args)
            if until(found):
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the page never showed what was waited for: {script.strip()[:200]}; "
                    f"last {str(found)[:1500]}"
                )
            time.sleep(0.5)

    def screenshot(self, path: Path) -> Path:
        """A PNG of the window at ``path``."""
        png = self._call("GET", f"/session/{self._session}/screenshot")
        path.write_bytes(base64.b64decode(png))
        return path
