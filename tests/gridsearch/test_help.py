"""`python -m gridsearch.run --help` says what every option is, and the default of every
option that takes a value, once: never "(default: None)", never two defaults."""

from __future__ import annotations

import re

import pytest

from gridsearch.run import main
from tests.help_text import options as _options


@pytest.fixture(scope="module")
def help_text() -> str:
    import contextlib
    import io

    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.setenv("COLUMNS", "100")  # argparse wraps at the terminal's width
        assert main(["--help"]) == 0
    return out.getvalue()


def test_every_option_has_a_description_and_one_default(help_text: str) -> None:
    options = _options(help_text)
    assert len(options) >= 30 and "--cpus-per-trial" in options and "--tracking-wait" in options
    for flag, (takes_value, description) in options.items():
        assert description, f"{flag} has no description"
        defaults = len(re.findall(r"\((?:no )?default\b", description))
        if takes_value:
            assert defaults == 1, f"{flag}: {defaults} defaults in {description!r}"
        else:
            assert defaults == 0, f"{flag} is a switch, yet shows a default: {description!r}"
    assert "(default: None)" not in help_text


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("--epochs", "(default: 32, the paper's"),
        ("--seed", "(default: 0)"),
        ("--max-failures", "(default: 2)"),
        ("--tracking-wait", "(default: 300)"),
        ("--cpus-per-trial", "(default: 1 without GPUs;"),
        ("--address", "HOST:PORT"),
        ("--address", "auto"),
        ("--num-samples", "a larger N extends the search"),
    ],
)
def test_the_options_that_said_nothing_now_do(help_text: str, flag: str, expected: str) -> None:
    assert expected in _options(help_text)[flag][1]


def test_the_space_option_names_every_space(help_text: str) -> None:
    from gridsearch.spaces import SPACES

    description = _options(help_text)["--space"][1]
    assert all(name in description for name in SPACES), description
