"""Reading a command's ``--help`` as a user does: its options and what each says, and the
checks every command's help passes (no raw markup; an option that takes a value says its
default once, or that it is required; a switch shows no default)."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable

import pytest

# reStructuredText/Markdown a terminal shows raw: ``literal``, `code`, :class:`X`, "::"
MARKUP = re.compile(r"`|:(?:class|func|meth|mod|attr):|::\s*$", re.M)


def help_of(main: Callable[[list[str]], object], argv: list[str]) -> str:
    """What ``main([*argv, "--help"])`` prints, 100 columns wide."""
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.setenv("COLUMNS", "100")  # argparse wraps at the terminal's width
        with pytest.raises(SystemExit) as done:
            main([*argv, "--help"])
    assert done.value.code in (0, None)
    return out.getvalue()


def options(help_text: str) -> dict[str, tuple[bool, str]]:
    """``{"--epochs": (True, "epochs per trial (default: ...)")}`` from argparse's help:
    whether the option takes a value, and its description. An entry starts on a line
    indented by two spaces and a dash (``--epochs N``, ``-h, --help``); its description
    follows on that line (after two spaces) and on the more deeply indented lines."""
    entries: dict[str, tuple[bool, str]] = {}
    flag = ""
    for line in help_text.splitlines():
        if re.match(r"^  -", line):
            invocation, _, description = line.strip().partition("  ")
            words = invocation.replace(",", " ").split()
            flag = [w for w in words if w.startswith("--")][-1]
            takes_value = any(not w.startswith("-") for w in words)
            entries[flag] = (takes_value, description.strip())
        elif flag and line.startswith("    "):
            takes_value, description = entries[flag]
            entries[flag] = (takes_value, f"{description} {line.strip()}".strip())
        else:
            flag = ""
    return entries


def check_help(help_text: str) -> dict[str, tuple[bool, str]]:
    """Assert the checks of the module docstring; the options, for more."""
    assert not MARKUP.search(help_text), MARKUP.search(help_text)
    assert "(default: None)" not in help_text
    found = options(help_text)
    assert "--help" in found
    for flag, (takes_value, description) in found.items():
        assert description, f"{flag} has no description"
        defaults = len(re.findall(r"\((?:no )?default\b", description))
        if takes_value:
            required = description.endswith("; required")
            assert defaults + required == 1, f"{flag}: {defaults} defaults in {description!r}"
        else:
            assert defaults == 0, f"{flag} is a switch, yet shows a default: {description!r}"
    return found
