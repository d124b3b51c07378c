"""A search stopped hard (a second Ctrl+C skips Tune's last save of its experiment) can
leave trials that finished saved as running: :func:`settle_finished` marks each whose
own results say it trained every epoch and reported its ensemble (every member's last
report) as ended before Tune restores the experiment, so a resume never runs a finished
trial again (from a checkpoint that may be gone since), and points its results at the
checkpoint it ended at."""

from __future__ import annotations

import itertools
import json
import pickletools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ray.tune.experiment import Trial

from gridsearch._layout import local_path
from gridsearch._relocate import rebase_pickle
from gridsearch.settings import SearchSettings
from storage import write_text_atomic
from trainables import names
from trainables.checkpoint import CheckpointError, load_training_state
from trainables.group import combine, state_file
from trainables.tune import member_key, member_metrics

__all__ = ["settle_finished"]


_LAST_RESULT_BYTES = 1 << 20  # a result line is a few KB: the end of result.json holds it


def settle_finished(settings: SearchSettings) -> dict[str, dict[str, Any]]:
    """Mark ended, in the newest saved experiment state of a local Tune experiment, the
    trials saved as running that finished: the newest checkpoint their workers wrote
    (kept whatever Tune's last save missed) holds, for every member, a training state
    whose last report has its ensemble. Their last result is then that of their
    ``result.json`` where it says so, else their members' last reports (the mean of
    their seeds). Returns their ids. Written whole (atomic); nothing written when there
    is none. See the module docstring."""
    folder = local_path(settings.experiment_path)
    if folder is None or not folder.is_dir():
        return {}
    states = sorted(folder.glob("experiment_state-*.json"))
    if not states:
        return {}
    state = json.loads(states[-1].read_text(encoding="utf-8"))  # checked whole (_damage)
    settled: dict[str, dict[str, Any]] = {}
    for entry in state["trial_data"]:
        trial, metadata = json.loads(entry[0]), json.loads(entry[1])
        if trial["status"] in (Trial.TERMINATED, Trial.ERROR):
            continue
        trial_folder = folder / str(trial.get("relative_logdir", ""))
        reports = _final_reports(trial_folder)
        if not reports or not all(names.is_finished(r) for r in reports.values()):
            continue  # still to run, or stopped where it was: Tune resumes it
        results = trial_folder / "result.json"
        last = _last_result(results)
        if not last or not all(names.is_finished(r) for r in member_metrics(last).values()):
            last = dict(metadata.get("last_result") or {})  # Tune's files end before it did
            for position, report in reports.items():
                last.update({member_key(position, k): v for k, v in report.items()})
            last.update(reports[min(reports)], trial_id=str(trial["trial_id"]))
            _append_result(results, last)  # its results end as it did (their last row)
        trial["status"] = Trial.TERMINATED
        metadata["last_result"] = last
        _point_at_newest(metadata, trial_folder)  # its results' checkpoint: the one it ended at
        entry[0], entry[1] = json.dumps(trial), json.dumps(metadata)
        settled[str(trial["trial_id"])] = last
    if settled:
        write_text_atomic(states[-1], json.dumps(state))
    return settled


def _point_at_newest(metadata: dict[str, Any], trial_folder: Path) -> None:
    """Make the trial's checkpoint manager (Tune's pickle, hex in the state's JSON) name
    the trial's newest checkpoint wherever it names another (older ones, some gone since:
    Tune's last save missed the newer; rewritten string by string, never unpickled). The
    trial has ended: none is restored, its results read the one it ended at."""
    manager = metadata.get("checkpoint_manager")
    if not (isinstance(manager, dict) and isinstance(manager.get("value"), str)):
        return
    found = sorted(trial_folder.glob("checkpoint_*"), key=lambda p: p.name)
    if not found:
        return
    try:
        data = bytes.fromhex(manager["value"])
        # the trial's folder wherever the state names it (a copied runs directory's state
        # names the original's: Tune points it at the copy when it restores the trial)
        pattern = re.compile(r".+/" + re.escape(trial_folder.name) + r"/checkpoint_\d+")
        named = sorted(
            arg
            for opcode, arg, _ in pickletools.genops(data)
            if isinstance(arg, str) and pattern.fullmatch(arg)
        )
    except (ValueError, TypeError):
        return  # not Tune's pickle as it writes it: left as it is
    for older in (Path(name) for name in set(named)):
        if older.name != found[-1].name:
            data = rebase_pickle(data, older, older.with_name(found[-1].name))
    manager["value"] = data.hex()


def _final_reports(trial_folder: Path) -> dict[int, dict[str, Any]] | None:
    """Each member's last report in the trial's newest checkpoint (by member position; the
    mean of its seeds), or None where there is none or it cannot be read."""
    found = sorted(trial_folder.glob("checkpoint_*"), key=lambda p: p.name)
    if not found:
        return None
    newest = found[-1]
    folders = sorted(newest.glob("member-*")) or [newest]  # a checkpoint before groups: one
    reports: dict[int, dict[str, Any]] = {}
    for member in folders:
        position = int(member.name.removeprefix("member-")) if member != newest else 0
        seeds = list(
            itertools.takewhile(Path.is_file, (member / state_file(i) for i in itertools.count()))
        )
        try:
            lasts = [load_training_state(path)["history"][-1] for path in seeds]
            reports[position] = combine(lasts)
        except (CheckpointError, ValueError, IndexError, KeyError, TypeError):
            return None  # not a whole training state: Tune resumes the trial as it was
    return reports or None


def _append_result(path: Path, result: Mapping[str, Any]) -> None:
    """``result`` as the last line of a trial's ``result.json`` (its whole lines kept; the
    file replaced whole)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    kept = []
    for line in lines:
        try:
            json.loads(line)
        except ValueError:
            continue  # cut short
        kept.append(line)
    write_text_atomic(path, "\n".join([*kept, json.dumps(result)]) + "\n")


def _last_result(path: Path) -> dict[str, Any] | None:
    """The last whole line of a trial's ``result.json`` (Tune appends a line per
    report), or None."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(path.stat().st_size - _LAST_RESULT_BYTES, 0))
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            found = json.loads(line)
        except ValueError:
            continue  # cut short
        return found if isinstance(found, dict) else None
    return None
