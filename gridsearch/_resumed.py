"""A ``--resume``'s settings: the search's record, with what this command line may
change (``RESUME_KEEPS``), its paths rebased when its runs directory was copied or
moved (``gridsearch.settings``)."""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import math
import os
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from gridsearch._arguments import build_parser
from gridsearch._flags import (
    COUNT_BOUNDS,
    SEED_LIMIT,
    TRACKING_SCHEMES,
    SearchError,
    check_amounts,
    check_count,
    check_experiment_name,
)
from gridsearch._layout import RunsLayout, local_path, rebase
from gridsearch._record import STARTED
from gridsearch._settings import RecordedSettings
from storage.cli import error_line

# the class is handed in (``SearchSettings``: gridsearch.settings builds on this module)
Settings = TypeVar("Settings", bound=RecordedSettings)

__all__ = ["RESUME_KEEPS", "BadRecord", "check_record", "resumed"]

# What a --resume takes from its own command line; everything else comes from the
# search's record, so the continued search runs exactly as it started. num_samples only
# grows: a larger --num-samples extends the search (the record keeps the new number).
RESUME_KEEPS = (
    "resume",
    "num_samples",
    "address",
    "dashboard",
    "dashboard_host",
    "tracking_wait_s",
    "min_free_disk_mb",
)


class BadRecord(ValueError):
    """A search record that is not what a search writes (the message names the field)."""


def _from_saved(record: Any, settings_class: type[Settings]) -> Settings:
    """Settings from a record: ``asdict(SearchSettings)``, or the parsed command line that
    searches started before the settings were typed wrote (``{"args": ...}``); each field
    checked first (``check_record``)."""
    if not isinstance(record, dict):
        raise BadRecord(f"a JSON {type(record).__name__}, expected an object")
    if "args" not in record:
        check_record(record, settings_class)
        return settings_class.from_record(record)
    saved = {**vars(build_parser().parse_args([])), **record["args"]}
    saved.update(resume=False, runs_dir=Path(saved["runs_dir"]))
    if saved.get("space_file"):
        saved["space_file"] = Path(saved["space_file"])
    return settings_class.started(argparse.Namespace(**saved))


def resumed(args: argparse.Namespace, settings_class: type[Settings]) -> Settings:
    """The settings a search started with (its record), with what a ``--resume`` may
    change taken from this command line (``settings_class``: ``SearchSettings``)."""
    if not args.experiment:
        raise SearchError("--resume needs --experiment NAME (the search to continue)")
    if args.warm_start is not None:
        raise SearchError(
            "--warm-start applies when a search starts; a --resume continues its own study"
        )
    check_experiment_name(args.experiment)
    check_amounts(args)
    layout = RunsLayout.at(args.runs_dir)
    path = layout.record(args.experiment)
    if not path.exists():
        loop = _link_loop(Path(args.runs_dir), path)
        if loop is not None:
            raise SearchError(
                f"--resume: {loop} is a symbolic link loop (it leads back to itself, "
                f"so nothing under it can be read), on the way to the record {path}: "
                + (
                    "restore the record (a search writes it as a file)"
                    if loop == path
                    else "point --runs-dir at the runs directory itself"
                )
            )
        raise SearchError(
            f"--resume: no search named {args.experiment!r} under --runs-dir "
            f"{args.runs_dir} (expected its record {path})"
        )
    try:
        settings = _from_saved(json.loads(path.read_text(encoding="utf-8")), settings_class)
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, RecursionError) as err:
        said = str(err) if isinstance(err, BadRecord) else error_line(err, 200)
        raise SearchError(
            f"--resume: {path} is not a readable search record ({said}); "
            "it is written when a search starts (and when a --resume extends "
            "it), never by hand: start a new search, or restore the file"
        ) from None
    if settings.experiment != args.experiment:
        raise SearchError(
            f"--resume: {path} records the search {settings.experiment!r}, not "
            f"{args.experiment!r}; the file was moved or edited"
        )
    if settings.layout.root != layout.root:  # copied or moved since the search started
        settings = _moved(settings, layout)
    _check_said(args, settings, path)
    now = {
        "resume": True,
        "num_samples": _resumed_trials(args, settings),
        "address": args.address,
        "dashboard": not args.no_dashboard,
        "dashboard_host": args.dashboard_host,
        "tracking_wait_s": args.tracking_wait,
        "min_free_disk_mb": settings.min_free_disk_mb
        if args.min_free_disk is None
        else args.min_free_disk,
    }
    assert tuple(now) == RESUME_KEEPS
    return dataclasses.replace(settings, **now)


def _link_loop(given: Path, record: Path) -> Path | None:
    """The first symbolic link on the way to ``record`` (from the ``--runs-dir`` as
    ``given``, then the record's own path) that loops back on itself, or None."""
    for path in (
        *reversed(given.absolute().parents),
        given.absolute(),
        *record.parents[::-1],
        record,
    ):
        try:
            os.stat(path)
        except OSError as err:
            if err.errno == errno.ELOOP:
                return path
    return None


# flags a --resume reads besides RESUME_KEEPS' (or handles before it: --list-spaces)
_RESUME_READS = {"experiment", "runs_dir", "quiet", "list_spaces", "no_dashboard",
                 "tracking_wait", "min_free_disk", "warm_start"}  # fmt: skip
# a flag's destination -> the setting it gives, and how (the rest: the same name, as is)
_SETTING_OF = {"time_budget": "time_budget_s", "no_verify": "verify"}


def _check_said(args: argparse.Namespace, settings: Settings, record: Path) -> None:
    """Refuse a flag given with ``--resume`` that the resumed search would not follow:
    one that sets what the search recorded (``--objective``, ``--fuse``, ...) to another
    value than the record's. A flag given with the recorded value is what the resume
    does anyway. (A namespace built without ``parse_args``: the flags off their
    default count as given.)"""
    defaults = vars(build_parser().parse_args([]))
    given = getattr(args, "given", None)
    if given is None:
        given = {dest for dest, value in defaults.items() if getattr(args, dest, value) != value}
    for dest in sorted(given):
        if dest in RESUME_KEEPS or dest in _RESUME_READS or dest not in defaults:
            continue
        said, recorded = _as_setting(dest, getattr(args, dest)), _recorded(settings, dest)
        if said == recorded:
            continue
        flag = _flag(dest, getattr(args, dest))
        raise SearchError(
            f"{flag}: a --resume continues the search {settings.experiment!r} with the "
            f"settings it started with ({_flag(dest, _as_arg(dest, recorded))}, its record "
            f"{record}); leave {flag.split()[0]} out, or start a new search (--warm-start "
            f"{settings.experiment} starts one from its finished trials)"
        )


def _as_setting(dest: str, value: Any) -> Any:
    """What the flag ``dest`` given ``value`` makes of its setting (``from_args``)."""
    if dest == "no_verify":
        return not value
    if dest in ("space_file", "data") and value is not None and "://" not in str(value):
        return str(Path(value).resolve())
    return str(value) if isinstance(value, Path) else value


def _recorded(settings: Settings, dest: str) -> Any:
    value = getattr(settings, _SETTING_OF.get(dest, dest))
    return str(value) if isinstance(value, Path) else value


def _as_arg(dest: str, setting: Any) -> Any:
    return not setting if dest == "no_verify" else setting


def _flag(dest: str, value: Any) -> str:
    """How the command line says ``dest`` is ``value``."""
    if dest == "baselines":
        return "--baselines" if value else "--no-baselines"
    name = "--" + dest.replace("_", "-")
    if isinstance(value, bool) or value is None:  # a switch (or a setting left unset)
        return name if value else f"without {name}"
    return f"{name} {value}"


# the settings that name files; those under the recorded runs directory move with it
_PATHS = ("storage_path", "tracking_uri", "optuna_storage", "data", "senteval", "space_file")


def _moved(settings: Settings, layout: RunsLayout) -> Settings:
    """The settings of a search whose runs directory was at ``settings.layout.root``
    when it started and is at ``layout.root`` now (a copy, or moved): every path under
    the old place names the same file under the new one; paths given outside it (a
    --storage-path elsewhere, a tracking server) stay as they are. A local one that
    does not exist is refused, naming where the record came from."""
    old = settings.layout.root
    values: dict[str, Any] = {}
    for name in _PATHS:
        value = getattr(settings, name)
        if value is not None:
            moved = rebase(str(value), old, layout.root)
            values[name] = Path(moved) if isinstance(value, Path) else moved
    moved_settings = dataclasses.replace(settings, layout=layout, moved_from=old, **values)
    experiment = moved_settings.experiment_path
    local = local_path(experiment)
    if local is not None and not local.is_dir():
        raise SearchError(
            f"--resume: the search {settings.experiment!r} started in the runs directory "
            f"{old} (its record {layout.record(settings.experiment)} says so), which is now "
            f"--runs-dir {layout.root}; its Tune experiment {experiment} is not there: "
            "copy or move the whole runs directory (and a --storage-path outside it)"
        )
    return moved_settings


def _resumed_trials(args: argparse.Namespace, settings: Settings) -> int | None:
    """The number of trials a ``--resume`` runs up to: the record's, or a larger
    ``--num-samples``, which extends the search (more trials of the same Optuna study)."""
    wanted, recorded = args.num_samples, settings.num_samples
    if wanted is None:
        return recorded
    check_count("--num-samples", wanted, *COUNT_BOUNDS["num_samples"])
    if recorded is not None and wanted < recorded:
        raise SearchError(
            f"--num-samples {wanted}: the search {settings.experiment!r} was asked for "
            f"{recorded} trials, and a --resume cannot take any back; give {recorded} or "
            "more (more extends it), or leave --num-samples out"
        )
    if wanted != recorded and (args.address or "").startswith("ray://"):
        raise SearchError(
            f"--num-samples {wanted} with --address {args.address}: a search is extended "
            "by a driver on the cluster (--address auto or HOST:PORT), not through Ray Client"
        )
    return wanted


# -- the record's fields, each checked as the flags that set it are -----------------------

_NOT_RECORDED = ("moved_from",)
# amounts: (setting, what it is, zero allowed); None is "not set" where the type allows it
_AMOUNTS = (
    ("time_budget_s", "a number of seconds > 0", False),
    ("tracking_wait_s", "a number of seconds >= 0", True),
    ("cpus_per_trial", "a number of CPUs > 0", False),
    ("gpus_per_trial", "a number of GPUs >= 0", True),
    ("min_free_disk_mb", "a number of MB >= 0", True),
)


def check_record(record: dict[str, Any], settings_class: type[RecordedSettings]) -> None:
    """Every field of a search record is what a search writes: no field unknown or
    missing, each of its setting's type, a choice among its flag's choices, a count or
    amount in its flag's range, a name where it names files. ``BadRecord`` naming the
    first field that is not (its value shown short)."""
    fields = {f.name: f for f in dataclasses.fields(settings_class) if f.name not in _NOT_RECORDED}
    unknown = sorted(set(record) - set(fields) - {STARTED})
    if unknown:
        raise BadRecord(f"field {unknown[0][:40]!r}: not a setting of a search")
    hints = typing.get_type_hints(settings_class)
    for name, field in fields.items():
        if name not in record:
            if field.default is dataclasses.MISSING:
                raise BadRecord(f"field {name!r}: missing")
            continue
        expected = _expected(record[name], hints[name])
        if expected is not None:
            raise BadRecord(f"field {name!r}: {_short(record[name])}, expected {expected}")
    for name, choices in _choices().items():
        if name in record and record[name] not in choices:
            raise BadRecord(
                f"field {name!r}: {_short(record[name])}, expected one of {', '.join(choices)}"
            )
    _check_values(record)


def _check_values(record: dict[str, Any]) -> None:
    def bad(name: str, expected: str) -> BadRecord:
        return BadRecord(f"field {name!r}: {_short(record[name])}, expected {expected}")

    for name, (bound, each) in COUNT_BOUNDS.items():
        try:
            check_count(name, record.get(name), bound, each,
                        non_negative=name in ("epochs", "max_failures", "fuse"))  # fmt: skip
        except SearchError:
            lowest = 0 if name in ("epochs", "max_failures", "fuse") else 1
            raise bad(name, f"an integer from {lowest} to {bound:,}") from None
    if not 0 <= record["seed"] < SEED_LIMIT:
        raise bad("seed", f"an integer from 0 to {SEED_LIMIT - 1}")
    for name, expected, zero_ok in _AMOUNTS:
        value = record.get(name)
        if value is not None and (
            not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok)
        ):
            raise bad(name, expected)
    for name in ("experiment", "warm_start"):
        if record.get(name) is not None:
            try:
                check_experiment_name(record[name])
            except SearchError:
                raise bad(name, "a name of letters, digits, '.', '_' and '-'") from None
    if not isinstance(record["layout"].get("root"), str) or not record["layout"]["root"]:
        raise bad("layout", 'an object naming the runs directory: {"root": PATH}')
    for name in ("storage_path", "optuna_storage", "tracking_uri", "dashboard_host"):
        if not record[name]:
            raise bad(name, "a path or URI")
    for name in ("space", "space_file", "data", "senteval", "address"):
        if record.get(name) == "":
            raise bad(name, "null or a name, path or URI")
    scheme = record["tracking_uri"].split(":", 1)[0]
    if scheme not in TRACKING_SCHEMES:
        raise bad("tracking_uri", f"a URI of scheme {', '.join(TRACKING_SCHEMES)}")
    if (record.get("space") is None) == (record.get("space_file") is None):
        raise BadRecord(
            f"fields 'space' and 'space_file': {_short(record.get('space'))} and "
            f"{_short(record.get('space_file'))}, expected one of the two (a space's name, "
            "or its file)"
        )


def _expected(value: Any, hint: Any) -> str | None:
    """What ``value`` (from JSON) should be for a setting of type ``hint``, or None when
    it is that: a path is a string; the runs directory's layout an object."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        arms = typing.get_args(hint)
        said = [_expected(value, arm) for arm in arms]
        if any(s is None for s in said):
            return None
        return " or ".join(s for s in said if s)
    if hint is type(None):
        return None if value is None else "null"
    if hint is bool:
        return None if isinstance(value, bool) else "true or false"
    if hint is int:
        return None if type(value) is int else "an integer"
    if hint is float:
        return None if type(value) in (int, float) else "a number"
    if hint in (str, Path):
        return None if isinstance(value, str) else "a string"
    if hint is RunsLayout:
        return None if isinstance(value, dict) else "an object"
    return None if isinstance(value, hint) else f"a {hint.__name__}"


def _choices() -> dict[str, tuple[str, ...]]:
    """The settings whose flag takes one of a few values, and those values."""
    found = {}
    for action in build_parser()._actions:
        if action.choices is not None:
            found[_SETTING_OF.get(action.dest, action.dest)] = tuple(map(str, action.choices))
    return found


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else f"{text[: limit - 15]}... ({len(text)} chars)"
