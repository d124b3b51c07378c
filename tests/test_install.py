"""The README's two set-up commands, `.ci/run` and `constraints.txt` agree: CI runs the
README's test command word for word in a fresh virtual environment, and the constraints
pin every dependency the project names to a version its own range admits."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    quick_start = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", quick_start)


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not NAME==VERSION"
            pins[canonicalize_name(name)] = version
    return pins


def test_ci_runs_the_readme_test_command_in_a_new_virtual_environment() -> None:
    main_job, tests = _readme_commands()
    assert "-c constraints.txt" in main_job and "-c constraints.txt" in tests
    script = (ROOT / ".ci" / "run").read_text()
    assert tests in script.splitlines()
    assert "python3 -m venv" in script and 'source "$venv/bin/activate"' in script


def test_constraints_pin_every_dependency_within_its_range() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = _pins()
    named = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    for text in named:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"constraints.txt pins no version of {requirement.name}"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {requirement.name}=={pins[name]}, outside {text!r}"
        )


def test_ci_installs_the_browser_the_ui_tests_skip_without() -> None:
    """The UI tests skip where Chromium or chromedriver is missing; CI installs Debian's
    packages of both when either is, before the tests, so that they run on every landing
    (and fails, not skips, where it cannot install them)."""
    script = (ROOT / ".ci" / "run").read_text()
    tests = script.index("python -m pytest")
    install = script.index("apt-get install -y -qq chromium chromium-driver")
    assert install < tests
    assert "! command -v chromium" in script and "! command -v chromedriver" in script
    assert "exit 1" in script[:install]  # not root: a failed CI, not skipped UI tests
    looked_for = (ROOT / "tests" / "gridsearch" / "tracking" / "mlflow_ui.py").read_text()
    assert 'shutil.which("chromium")' in looked_for and 'shutil.which("chromedriver")' in looked_for
