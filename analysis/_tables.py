"""The paper's tables for the search's best trials (computing, then formatting):
retrieval in the layout of Tables 2-3 and semantic similarity in the layout of Table 5,
with the paper's numbers beside ours when the data set is the same."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import NamedTuple

import pandas as pd

from analysis import _families, reference
from analysis._data import SearchRecord
from gridsearch.summary import BASELINE_LABELS
from trainables import names
from trainables.stats import pearson_ci, recall_ci

RETRIEVAL_COLUMNS = (
    "c2i_r1",
    "c2i_r5",
    "c2i_r10",
    "c2i_medr",
    "i2c_r1",
    "i2c_r5",
    "i2c_r10",
    "i2c_medr",
)
_DIRECTIONS = {"c2i": "Caption to Image", "i2c": "Image to Caption"}
_MEASURES = {"r1": "R@1", "r5": "R@5", "r10": "R@10", "medr": "med r"}
# Table 5 ends with STS-B and SICK-R by SentEval's supervised protocol, each followed,
# beyond the paper, by the same test pairs by cosine similarity (the protocol of SimCSE
# and MTEB): a task's rows stay together, so the task is named once above them.
_SUPERVISED = ("stsb_pearson", "stsb_cosine_pearson", "sickr_pearson", "sickr_cosine_pearson")
_AGGREGATE = re.compile(r"^sts\d\d_pearson$|_pearson_mean$|^sts12_16_pearson$")


class PaperTable(NamedTuple):
    table: pd.DataFrame  # numbers (what the CSV holds)
    note: str  # where the reference rows come from, or why there are none


def reference_note(dataset: str | None, available: bool, source: str) -> str:
    if dataset is None:
        return "the data set is unknown (its store cannot be read here): no paper reference"
    if not available:
        return f"no paper reference for this data set ({dataset})"
    return f"paper reference: {source}"


def retrieval_table(record: SearchRecord, chosen: Sequence[tuple[str, str]]) -> PaperTable:
    """Tables 2-3: test R@1/5/10 and median rank in both directions for each chosen trial,
    R@K with the normal-approximation 95% interval (n = test images, as the paper); then
    the paper's char-GRU row with its printed +- when the data set matches."""
    trials = record.trials.set_index("trial_id")
    n = record.split_images.get("test")
    rows = []
    for trial_id, why in chosen:
        row: dict[str, object] = {"model": trial_id, "source": f"ours: {why}"}
        for name in RETRIEVAL_COLUMNS:
            value = float(trials.loc[trial_id].get(names.key(names.ENSEMBLE, name), math.nan))
            row[name] = value
            if not name.endswith("medr"):
                low, high = recall_ci(value, n) if n and not math.isnan(value) else (math.nan,) * 2
                row[f"{name}_ci_low"], row[f"{name}_ci_high"] = low, high
        rows.append(row)
    ref = reference.RETRIEVAL.get(record.dataset or "")
    if ref is not None:
        row = {"model": ref.label, "source": ref.source}
        for name in RETRIEVAL_COLUMNS:
            row[name] = ref.values[name]
            if name in ref.half_widths:
                half = ref.half_widths[name]
                row[f"{name}_ci_low"], row[f"{name}_ci_high"] = (
                    ref.values[name] - half,
                    ref.values[name] + half,
                )
        rows.append(row)
    note = reference_note(record.dataset, ref is not None, ref.source if ref else "")
    return PaperTable(pd.DataFrame(rows), note)


def semantic_table(record: SearchRecord, chosen: Sequence[tuple[str, str]]) -> PaperTable:
    """Table 5: test Pearson r x 100 per STS subtask, then STS-B and SICK-R, each with
    its Fisher-z 95% interval (n = the subtask's pairs), one row per (subtask, model),
    the store's char n-gram baselines (where the search computed them) and the paper's
    char-GRU column for the same training data set alongside: the subtasks where a bag
    of n-grams misleads (word order, synonyms that share no characters) are where a
    sequence model has to win."""
    trials = record.trials.set_index("trial_id")
    present = {
        c.removeprefix(f"{names.ENSEMBLE}/")
        for c in trials.columns
        if c.startswith(f"{names.ENSEMBLE}/") and c.endswith("_pearson")
    }
    keys = [k for k in record.semantic_labels if k in present and k not in _SUPERVISED]
    keys += sorted(k for k in present - set(keys) - set(_SUPERVISED) if not _AGGREGATE.search(k))
    keys += [k for k in _SUPERVISED if k in present]  # Table 5 ends with them
    rows = []
    for key in keys:
        task, subtask = record.semantic_labels.get(key, _label(key))
        if key == "stsb_pearson":  # the encoding changes the number: say which it is
            subtask = f"{subtask}, {_stsb_encodings(trials, chosen)} encoding"
        n = record.pair_counts.get(key)
        for trial_id, why in chosen:
            r = float(trials.loc[trial_id].get(names.key(names.ENSEMBLE, key), math.nan))
            low, high = pearson_ci(r, n) if n and n > 3 else (math.nan, math.nan)
            rows.append(
                _semantic_row(task, subtask, key, n, trial_id, f"ours: {why}", r, low, high)
            )
    for name, baseline in BASELINE_LABELS.items():
        values = record.baselines.get(name, {})
        for key in keys:
            r = float(values.get(names.key(names.TEST, key), math.nan))
            if math.isnan(r):
                continue
            task, subtask = record.semantic_labels.get(key, _label(key))
            n = record.pair_counts.get(key)
            low, high = pearson_ci(r, n) if n and n > 3 else (math.nan, math.nan)
            rows.append(_semantic_row(task, subtask, key, n, baseline, "baseline", r, low, high))
    label, refs = reference.SEMANTIC.get(record.dataset or "", ("", {}))
    for key in (k for k in keys if k in refs):
        task, subtask = record.semantic_labels.get(key, _label(key))
        ref = refs[key]
        rows.append(
            _semantic_row(
                task,
                subtask,
                key,
                record.pair_counts.get(key),
                label,
                reference.SEMANTIC_SOURCE,
                ref.r / 100,
                (ref.r - ref.minus) / 100,
                (ref.r + ref.plus) / 100,
            )
        )
    note = reference_note(record.dataset, bool(refs), reference.SEMANTIC_SOURCE)
    if refs and not any(k in refs for k in keys):
        note = "the semantic sets are not SentEval's: no paper reference"
    columns = ["task", "subtask", "key", "n", "model", "source", "r", "ci_low", "ci_high"]
    return PaperTable(pd.DataFrame(rows, columns=columns), note)


def _semantic_row(
    task: str, subtask: str, key: str, n: int | None, model: str, source: str, *values: float
) -> dict[str, object]:
    r, low, high = (100 * v for v in values)  # Pearson x 100, as Table 5 prints it
    return {
        "task": task,
        "subtask": subtask,
        "key": key,
        "n": n,
        "model": model,
        "source": source,
        "r": r,
        "ci_low": low,
        "ci_high": high,
    }


def _stsb_encodings(trials: pd.DataFrame, chosen: Sequence[tuple[str, str]]) -> str:
    """The STS-B encodings (``stsb_encoding``) the chosen trials were scored with."""
    column = trials.get("stsb_encoding")
    used = {"senteval" if column is None else str(column.loc[t]) for t, _ in chosen}
    return "/".join(sorted(used)) or "senteval"


def _label(key: str) -> tuple[str, str]:
    """(task, subtask) from a metric name alone: ``sts12_foo_bar_pearson`` -> STS12, foo bar."""
    year, _, rest = key.removesuffix("_pearson").partition("_")
    return year.upper(), rest.replace("_", " ")


# -- formatting for the page -------------------------------------------------------------


def format_retrieval(table: pd.DataFrame) -> pd.DataFrame:
    """Tables 2-3 as strings, each R@K with its 95% interval as "27.5 [24.7, 30.3]" (the
    report's one notation, which also holds an interval clipped at 0 or 100), under
    two-level headers; the model and where its numbers come from first."""
    columns = pd.MultiIndex.from_tuples(
        [("", "model"), ("", "source")]
        + [(_DIRECTIONS[c[:3]], _MEASURES[c[4:]]) for c in RETRIEVAL_COLUMNS]
    )
    cells = [
        [row["model"], row["source"], *(_interval(row, c) for c in RETRIEVAL_COLUMNS)]
        for row in table.to_dict("records")
    ]
    return pd.DataFrame(cells, columns=columns)


def _interval(row: dict[str, object], name: str, scale: float = 1.0) -> str:
    """``row[name]`` with its interval (``name_ci_low``, ``name_ci_high``), times ``scale``."""
    value, low, high = (
        scale * float(row.get(k, math.nan))  # type: ignore[arg-type]
        for k in (name, f"{name}_ci_low", f"{name}_ci_high")
    )
    return interval_text(value, low, high)


def interval_text(value: float, low: float, high: float) -> str:
    """The report's one way of writing an estimate with its 95% interval:
    ``75.0 [70.2, 100.0]``; the value alone when the interval is unknown, "-" for none."""
    if math.isnan(value):
        return "-"
    if math.isnan(low) or math.isnan(high):
        return f"{value:.1f}"
    return f"{value:.1f} [{low:.1f}, {high:.1f}]"


def format_semantic(table: pd.DataFrame) -> pd.DataFrame:
    """Table 5 as strings: one row per subtask, one column per model, "r [low, high]"
    (Pearson r x 100). A task is named on its first row only, as in the paper, so its
    rows must be consecutive: a task whose rows are apart is named again."""
    if table.empty:
        return pd.DataFrame()
    header = [
        m if not s.startswith("ours: ") else f"{m} ({s.removeprefix('ours: ')})"
        for m, s in zip(table["model"], table["source"], strict=True)
    ]
    cells = table.assign(
        header=header,
        cell=[
            interval_text(r, lo, hi)
            for r, lo, hi in zip(table["r"], table["ci_low"], table["ci_high"], strict=True)
        ],
        n=table["n"].map(lambda n: "-" if pd.isna(n) else str(int(n))),
    )
    wide = cells.pivot(index="key", columns="header", values="cell")
    rows = cells.drop_duplicates("key").set_index("key")[["task", "subtask", "n"]]
    out = rows.join(wide[list(dict.fromkeys(header))]).reset_index(drop=True)
    repeated = out["task"].eq(out["task"].shift())  # the row above names the same task
    out.loc[repeated, "task"] = ""
    return out


# -- the encoder families (analysis._families) ------------------------------------------

_FAMILY_HEADERS = {
    "r10_mean": "test R@10 mean",
    "c2i_r10": "c2i R@10",
    "i2c_r10": "i2c R@10",
    "semantic": "test semantic x100",
    "sts12_16_pearson": "STS12-16 r x100",
    "stsb_pearson": "STS-B r x100",
    "sickr_pearson": "SICK-R r x100",
}


def format_families(best: pd.DataFrame) -> pd.DataFrame:
    """``analysis._families.best_of_families`` as strings in the report's one interval
    notation: R@10 "62.2 [55.5, 68.9]", Pearson r x 100 with its Fisher-z interval
    "71.7 [69.6, 73.7]"."""
    rows = []
    for row in best.to_dict("records"):
        cells: dict[str, object] = {
            "family": row["family"],
            "selected on": row["selected on"],
            "trial": row["trial_id"],
            "finished / trials": f"{row['finished']} / {row['trials']}",
            "dev value": row["dev value"],
        }
        for name, header in _FAMILY_HEADERS.items():
            cells[header] = _interval(row, name, 1 if name in _families.RECALLS else 100)
        rows.append(cells)
    return pd.DataFrame(rows)
