"""`python -m storage.build --help` and its subcommands' read as plain text, say every
option's default or that it is required, and name the values an option takes."""

from __future__ import annotations

import pytest

from storage import build
from tests.help_text import check_help, help_of


@pytest.mark.parametrize(
    "argv", [[], ["karpathy"], ["synthetic"]], ids=["build", "karpathy", "synthetic"]
)
def test_the_help_is_plain_text_with_every_default(argv: list[str]) -> None:
    text = help_of(build.main, argv)
    found = check_help(text)
    assert "Exit status: 0, 2" in text
    if argv:  # a subcommand's options: every one described, with its default
        assert "(default: 32)" in found["--batch-size"][1]
        assert "(default: 1024)" in found["--shard-size"][1]
        assert "--dtype" in found and "--feature-compression" in found


def test_the_top_level_help_shows_the_examples_as_written() -> None:
    text = help_of(build.main, [])
    assert "  python -m storage.build synthetic --out stores/world\n" in text
    assert "karpathy            Flickr8k/Flickr30k/COCO" in text


def test_the_world_says_which_options_only_resnet_features_use() -> None:
    found = check_help(help_of(build.main, ["synthetic"]))
    for flag in ("--weights", "--device", "--batch-size", "--workers"):
        assert "--features resnet only" in found[flag][1], flag
    assert "(default: 2000)" in found["--images"][1]
    assert "--features resnet only" not in found["--shard-size"][1]
