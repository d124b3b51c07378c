"""The documentation site builds with warnings as errors (a broken link or anchor, a page
missing from the navigation, an API name mkdocstrings cannot resolve all fail it), and
what it generates from the code is there: an API page per package and the history; and
the pages' generated parts (every command's options from its own parser, the named
spaces, the metric names) are in the Markdown files, as the code states them now."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("storage", "trainables", "gridsearch", "analysis")


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    return out


@pytest.mark.slow
def test_the_site_builds_strictly_with_what_it_generates(site: Path) -> None:
    search = (site / "search" / "index.html").read_text()
    for option in ("--space-file", "--scheduler", "--resume", "--seeds-per-config"):
        assert f"<code>{option}" in search, option
    assert "<code>margin_sweep</code>" in search  # the named spaces
    assert "dev/r10_mean_best" in (site / "metrics" / "index.html").read_text()
    for package in PACKAGES:
        assert (site / "api" / package / "index.html").is_file(), package
    api = (site / "api" / "trainables" / "index.html").read_text()
    assert 'id="trainables.encoder.SentenceEncoder"' in api
    assert 'id="trainables.fuse"' in api  # a name of the lazy face, through TYPE_CHECKING
    assert "Feature-store reads" in (site / "history" / "index.html").read_text()


@pytest.mark.slow
def test_the_site_reads_offline(site: Path) -> None:
    """No page loads anything from another host (Material's web fonts are off)."""
    for page in site.rglob("*.html"):
        text = page.read_text()
        remote = re.findall(r'<(?:link|script)[^>]+(?:href|src)="(https?://[^"]+)"', text)
        assert remote == [], f"{page.relative_to(site)} loads {remote}"


def _commands() -> list[tuple[str, list[str]]]:
    """Every command line of the packages (a public module with ``main`` run as
    ``__main__``), a sub-command each where it has them."""
    hooks = _hooks()
    found = []
    for package in PACKAGES:
        for module in hooks.public_modules(package):
            path = ROOT / Path(*module.split("."))
            source = path.with_suffix(".py") if path.with_suffix(".py").is_file() else None
            if source is None or '__name__ == "__main__"' not in source.read_text():
                continue
            parser = hooks.command_parser(module, [])
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            names = [name for action in subs for name in action.choices]
            found += [(module, [name]) for name in names] or [(module, [])]
    return found


def test_every_command_has_its_options_in_the_docs() -> None:
    """The options reference is generated (``docs/hooks.py``), but a page has to ask for
    it: each command line appears once, so a new one cannot go undocumented."""
    pages = "\n".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    asked = re.findall(r"<!-- generated: options ([\w. -]+?) -->", pages)
    commands = [" ".join([module, *argv]) for module, argv in _commands()]
    assert "gridsearch.run" in commands and "storage.build karpathy" in commands
    assert sorted(asked) == sorted(commands)


def test_the_pages_generated_parts_are_what_the_code_states() -> None:
    """The options, the spaces and the metric names are written into the Markdown files
    (GitHub shows them as the site does); a part the code has changed since is stale."""
    hooks = _hooks()
    stale = [str(page.relative_to(ROOT)) for page in hooks.stale_pages()]
    assert stale == [], f"stale generated parts in {stale}: run `{hooks.REGENERATE}`"
    assert hooks.main(["--check"]) == 0


@pytest.mark.parametrize(
    "edit",
    [
        lambda text: text.replace("<code>margin_sweep</code>", "<code>margin_swept</code>"),
        lambda text: text.replace("<!-- end of generated -->", "", 1).replace(
            "<table>", "<table>\n<tr><td>left over</td></tr>", 1
        ),  # a part begun but never generated (no end marker), after a stray row
        lambda text: re.sub(
            r"(<!-- generated: spaces -->).*?(<!-- end of generated -->)",
            r"\1\n\2",
            text,
            flags=re.DOTALL,
        ),
    ],
    ids=["hand-edited", "never-generated", "emptied"],
)
def test_a_stale_generated_part_is_written_anew(edit: Callable[[str], str]) -> None:
    hooks = _hooks()
    page = (ROOT / "docs" / "search.md").read_text(encoding="utf-8")
    stale = edit(page)
    assert stale != page and hooks.regenerate(stale) != stale
    if "left over" not in stale:
        assert hooks.regenerate(stale) == page
    assert hooks.regenerate(page) == page


def test_a_metric_name_without_a_meaning_stops_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    hooks = _hooks()
    assert len(hooks.metric_rows()) == len(hooks.MEANINGS)
    monkeypatch.delitem(hooks.MEANINGS, "r10_mean")
    with pytest.raises(ValueError, match="r10_mean"):
        hooks.metric_rows()
