"""Which tasks a SentEval ``data/downstream`` directory holds: the official suite, or the
one its ``suite.json`` declares (the embedded world's, say). ``suite.json`` names become
file and directory names, so they are plain names: no '/', '..' or NUL."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storage._errors import MissingFileError, StoreError, describe
from storage._files import read_regular
from storage._json import parse_json
from storage._paths import NAME_RULE, name_problem

__all__ = ["OFFICIAL_STS", "OFFICIAL_SUPERVISED", "Suite", "check_root", "load_suite"]

HINT = "--senteval should point at SentEval's data/downstream directory (with STS/ and SICK/)"

OFFICIAL_STS: dict[str, tuple[str, ...]] = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),  # SMT is excluded by its licence
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}
OFFICIAL_SUPERVISED: tuple[str, ...] = ("STS-B", "SICK-R")


@dataclass(frozen=True)
class Suite:
    """Which tasks a directory holds."""

    name: str  # "senteval" for the official suite, else suite.json's name
    sts: dict[str, tuple[str, ...]]  # year dir prefix (e.g. "STS12") -> subtasks
    supervised: tuple[str, ...]  # subset of OFFICIAL_SUPERVISED


def check_root(root: str | os.PathLike[str]) -> Path:
    path = Path(root)
    if not path.is_dir():
        state = "is not a directory" if path.exists() else "does not exist"
        raise StoreError(f"{describe(path)}: the SentEval directory {state}; {HINT}")
    return path


def _name_list(value: Any, path: Path, field: str) -> tuple[str, ...]:
    """A non-empty list of distinct names, each usable as a file or directory name (years
    name ``STS/<year>-en-test``, subtasks ``STS.input.<subtask>.txt``)."""
    ok = isinstance(value, list) and value and all(isinstance(v, str) for v in value)
    if not ok or len(set(value)) != len(value):
        raise StoreError(
            f"{describe(path, field=field)}: expected a non-empty list of distinct names, "
            f"got {value!r}"
        )
    for name in value:
        problem = name_problem(name)
        if problem is not None:
            raise StoreError(
                f"{describe(path, field=field)}: expected names made of {NAME_RULE} (they "
                f"become file and directory names), got {name!r}, which {problem}"
            )
    return tuple(value)


def load_suite(root: str | os.PathLike[str]) -> Suite:
    """The suite ``root/suite.json`` declares, or the official SentEval suite without one."""
    path = check_root(root) / "suite.json"
    try:
        data = read_regular(path, "the suite description")
    except MissingFileError:
        return Suite("senteval", dict(OFFICIAL_STS), OFFICIAL_SUPERVISED)
    try:
        raw = parse_json(data, describe(path))
    except StoreError as err:
        raise StoreError(f"{err}; expected a JSON object (the suite's description)") from None
    expected = {"name", "sts", "supervised"}
    if not isinstance(raw, dict) or set(raw) != expected:
        got = sorted(raw) if isinstance(raw, dict) else type(raw).__name__
        raise StoreError(
            f"{describe(path)}: expected an object with exactly the fields "
            f"{sorted(expected)}, got {got}"
        )
    name, sts, supervised = raw["name"], raw["sts"], raw["supervised"]
    if not isinstance(name, str) or not name:
        where = describe(path, field="name")
        raise StoreError(f"{where}: expected a non-empty string, got {name!r}")
    if not isinstance(sts, dict):
        raise StoreError(
            f"{describe(path, field='sts')}: expected an object mapping year (e.g. 'STS12') "
            f"to a list of subtasks, got {sts!r}"
        )
    if sts:
        _name_list(list(sts), path, "sts")  # year keys name directories too
    years = {year: _name_list(subs, path, f"sts.{year}") for year, subs in sts.items()}
    known = isinstance(supervised, list) and all(s in OFFICIAL_SUPERVISED for s in supervised)
    if not known or len(set(supervised)) != len(supervised):
        raise StoreError(
            f"{describe(path, field='supervised')}: expected a list of distinct names from "
            f"{list(OFFICIAL_SUPERVISED)}, got {supervised!r}"
        )
    if not years and not supervised:
        raise StoreError(f"{describe(path)}: expected at least one task in 'sts' or 'supervised'")
    return Suite(name, years, tuple(supervised))
