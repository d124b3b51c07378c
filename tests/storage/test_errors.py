"""The one formatter of an exception for a message: its type and one line of it."""

from __future__ import annotations

from storage.cli import error_line, one_line


def test_an_exception_is_its_type_and_one_line() -> None:
    err = RuntimeError("first line\n  second line\n\ncaused by: the real reason\n")
    assert error_line(err) == "RuntimeError: first line"
    assert error_line(err, last=True) == "RuntimeError: caused by: the real reason"
    assert error_line(ValueError("x" * 50), limit=10) == "ValueError: " + "x" * 10
    assert error_line(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert error_line(OSError("  \n ")) == "OSError"


def test_a_message_on_one_line() -> None:
    assert one_line("a\n  b \n\n c") == "a b c"
