"""What a search was asked to do, read from its command line: ``SearchSettings``, typed,
frozen and validated once (``from_argv``). Its fields and their record on disk
(``RunsLayout.record``), from which ``--resume`` rebuilds it exactly, are
``gridsearch._settings.RecordedSettings``'.

The flags' checks are ``gridsearch._flags``; a ``--resume``'s settings (the record
merged with its command line, rebased when the runs directory moved) ``gridsearch._resumed``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from gridsearch._arguments import build_parser, given_flags
from gridsearch._flags import SearchError
from gridsearch._resumed import resumed
from gridsearch._settings import (
    DEFAULT_MIN_FREE_DISK_MB,
    OBJECTIVES,
    RecordedSettings,
    default_experiment,
    first_objective,
)
from trainables.config import CPU_SIZED, SMOKE

__all__ = [
    "CPU_SIZED",
    "DEFAULT_MIN_FREE_DISK_MB",
    "OBJECTIVES",
    "SMOKE",
    "SMOKE_WORLD_IMAGES",
    "NothingToRun",
    "SearchError",
    "SearchSettings",
    "default_experiment",
    "first_objective",
    "parse_args",
]

SMOKE_WORLD_IMAGES = 120


class NothingToRun(Exception):
    """A ``--resume`` of a search that ran every trial it was asked for (and no larger
    ``--num-samples``): not an error; the message says so in one line."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The raw command line (``--help``, ``--list-spaces``); ``SearchSettings.from_argv``
    validates it. ``given``: the flags it names (a ``--resume`` refuses those it would
    not follow)."""
    args = build_parser().parse_args(argv)
    args.given = given_flags(argv)
    return args


class SearchSettings(RecordedSettings):
    """A search's settings (``RecordedSettings``' fields) read from its command line."""

    @classmethod
    def from_argv(cls, argv: Sequence[str] | None) -> SearchSettings:
        """Validated settings from a command line; a ``--resume`` reads the rest from the
        search's record. Bad input raises ``SearchError`` naming the flag."""
        return cls.from_args(parse_args(argv))

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SearchSettings:
        if args.resume:
            return resumed(args, cls)
        return cls.started(args)
