"""A ``--resume``'s settings: the search's record, with what this command line may
change (``RESUME_KEEPS``), its paths rebased when its runs directory was copied or
moved (``gridsearch.settings``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gridsearch._arguments import build_parser
from gridsearch._flags import (
    COUNT_BOUNDS,
    SearchError,
    check_amounts,
    check_count,
    check_experiment_name,
)
from gridsearch._layout import RunsLayout, local_path, rebase
from storage.cli import error_line

if TYPE_CHECKING:  # the class is handed in: settings.py builds on this module
    from gridsearch.settings import SearchSettings

__all__ = ["RESUME_KEEPS", "resumed"]

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


def _from_saved(record: Any, settings_class: type[SearchSettings]) -> SearchSettings:
    """Settings from a record: ``asdict(SearchSettings)``, or the parsed command line that
    searches started before the settings were typed wrote (``{"args": ...}``)."""
    if not isinstance(record, dict):
        raise TypeError(f"expected a JSON object, got {type(record).__name__}")
    if "args" not in record:
        return settings_class.from_record(record)
    saved = {**vars(build_parser().parse_args([])), **record["args"]}
    saved.update(resume=False, runs_dir=Path(saved["runs_dir"]))
    if saved.get("space_file"):
        saved["space_file"] = Path(saved["space_file"])
    return settings_class.from_args(argparse.Namespace(**saved))


def resumed(args: argparse.Namespace, settings_class: type[SearchSettings]) -> SearchSettings:
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
        raise SearchError(
            f"--resume: no search named {args.experiment!r} under --runs-dir "
            f"{args.runs_dir} (expected its record {path})"
        )
    try:
        settings = _from_saved(json.loads(path.read_text(encoding="utf-8")), settings_class)
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, RecursionError) as err:
        raise SearchError(
            f"--resume: {path} is not a readable search record ({error_line(err, 200)}); "
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


# flags a --resume reads besides RESUME_KEEPS' (or handles before it: --list-spaces)
_RESUME_READS = {"experiment", "runs_dir", "quiet", "list_spaces", "no_dashboard",
                 "tracking_wait", "min_free_disk", "warm_start"}  # fmt: skip
# a flag's destination -> the setting it gives, and how (the rest: the same name, as is)
_SETTING_OF = {"time_budget": "time_budget_s", "no_verify": "verify"}


def _check_said(args: argparse.Namespace, settings: SearchSettings, record: Path) -> None:
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


def _recorded(settings: SearchSettings, dest: str) -> Any:
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


def _moved(settings: SearchSettings, layout: RunsLayout) -> SearchSettings:
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


def _resumed_trials(args: argparse.Namespace, settings: SearchSettings) -> int | None:
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
