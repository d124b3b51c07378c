"""Paired significance tests between two trials' snapshot ensembles (the tests
``analysis.compare``'s docstring lists, every one signed as B - A), the library part of
``python -m analysis.compare`` (which resolves its arguments and prints) and of the
report's family test (``analysis.report``): both import it, neither imports the other.

Rebuilding an ensemble needs torch (``analysis._ensemble``): it is imported when a
comparison runs, so that the report, which only formats one, loads without it.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pandas as pd
from mlflow.entities import Run
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from analysis import _stats
from analysis._data import AnalysisError, Progress, all_runs, experiment_id, silent, trial_label
from gridsearch import PARENT_TAG, ROLE_TAG, ROLE_TRIAL
from trainables import names
from trainables.presets import family_of
from trainables.stats import pearson

if TYPE_CHECKING:  # torch: imported when a comparison runs
    from analysis._ensemble import Ensemble, Scores
    from trainables.data import EncodedSplit

__all__ = [
    "ALPHA",
    "FAMILY_REF",
    "RECALLS",
    "SPLITS",
    "Comparison",
    "Progress",
    "best_of_family",
    "compare_retrieval",
    "compare_runs",
    "compare_semantic",
    "format_comparison",
    "verdict",
]

SPLITS = {"test": "test", "val": "val", "dev": "val"}
FAMILY_REF = "family:"  # RUN_A/RUN_B "family:word_bow": that family's best trial
ALPHA = 0.05  # the verdict's significance level
RECALLS = tuple(f"{d}_r{k}" for d in ("c2i", "i2c") for k in (1, 5, 10))  # higher is better


def compare_retrieval(a: Ensemble, b: Ensemble, *, resamples: int, seed: int) -> pd.DataFrame:
    """One row per retrieval metric: A, B, B - A, its bootstrap interval and the p values."""
    from analysis import _ensemble

    rows = _stats.paired_bootstrap(
        _ensemble.ranks(a), _ensemble.ranks(b), resamples=resamples, seed=seed
    )
    return pd.DataFrame(rows, columns=_stats.Difference._fields)


def compare_semantic(scores_a: Scores, scores_b: Scores) -> pd.DataFrame:
    """One row per semantic set both have: n, r(A, gold), r(B, gold), r(A, B), B - A,
    Steiger's z and p, Williams' t and p."""
    rows = []
    for key in (k for k in scores_a if k in scores_b):
        (pred_a, gold), (pred_b, _) = scores_a[key], scores_b[key]
        n = len(gold)
        r_a, r_b, r_ab = _r(pred_a, gold), _r(pred_b, gold), _r(pred_a, pred_b)
        z, p_z = _stats.steiger_z(r_a, r_b, r_ab, n)
        t, p_t = _stats.williams_t(r_a, r_b, r_ab, n)
        rows.append(
            {
                "metric": key,
                "n": n,
                "r_a": r_a,
                "r_b": r_b,
                "r_ab": r_ab,
                "diff": r_b - r_a,
                "steiger_z": z,
                "p_steiger": p_z,
                "williams_t": t,
                "p_williams": p_t,
            }
        )
    return pd.DataFrame(rows)


def _r(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r; NaN (undefined) for fewer than two pairs or a constant side."""
    return pearson(x, y) if len(x) >= 2 else math.nan


def format_comparison(header: list[str], retrieval: pd.DataFrame, semantic: pd.DataFrame) -> str:
    lines = [
        *header,
        "",
        "retrieval (paired bootstrap over images; McNemar exact test on R@K hits)",
    ]
    head = ("metric", "A", "B", "B-A", "95% CI of B-A", "p boot", "p McNemar")
    lines.append("{:<10} {:>7} {:>7} {:>7}  {:<17} {:>7} {:>9}".format(*head))
    for row in retrieval.itertuples():
        lines.append(
            f"{row.metric:<10} {row.a:7.2f} {row.b:7.2f} {row.diff:+7.2f}  "
            f"[{row.ci_low:+6.2f}, {row.ci_high:+6.2f}]  "
            f"{_p(row.p_bootstrap):>7} {_p(row.p_mcnemar):>9}"
        )
    if not semantic.empty:
        lines += [
            "",
            "semantic (Pearson r with the gold scores; Steiger's z and Williams' t for "
            "dependent correlations, r_AB = r between the models' scores)",
        ]
        lines.append(
            f"{'set':<34} {'n':>5} {'r A':>6} {'r B':>6} {'r AB':>6} {'B-A':>7} "
            f"{'z':>6} {'p':>7} {'t':>6} {'p':>7}"
        )
        for row in semantic.itertuples():
            lines.append(
                f"{row.metric:<34} {row.n:5d} {_num(row.r_a, '6.3f')} {_num(row.r_b, '6.3f')} "
                f"{_num(row.r_ab, '6.3f')} {_num(row.diff, '+7.3f')} "
                f"{_num(row.steiger_z, '6.2f')} {_p(row.p_steiger):>7} "
                f"{_num(row.williams_t, '6.2f')} {_p(row.p_williams):>7}"
            )
        if semantic[["steiger_z", "williams_t"]].isna().to_numpy().any():
            lines.append(
                "- : undefined there (a constant score, a correlation of exactly 1 on one "
                "side only, or n <= 3)"
            )
    lines += [
        "",
        f"verdict (B - A; p<{ALPHA:g} by the paired bootstrap for retrieval, Steiger's z "
        "for semantic)",
        *_verdicts(retrieval, semantic),
    ]
    return "\n".join(lines)


def _verdicts(retrieval: pd.DataFrame, semantic: pd.DataFrame) -> list[str]:
    lines = [
        verdict("retrieval", retrieval[retrieval["metric"].isin(RECALLS)], "p_bootstrap", "R@K")
    ]
    if not semantic.empty:
        lines.append(verdict("semantic", semantic, "p_steiger", "sets"))
    return lines


def verdict(family: str, rows: pd.DataFrame, p_column: str, unit: str) -> str:
    """One line: on how many of ``rows`` (each a metric where higher is better, with a
    ``diff`` = B - A and a p value in ``p_column``) B is better, A is better or they tie,
    and on how many of those the difference is significant (p < ALPHA). Rows whose
    difference is undefined (NaN) are left out."""
    if rows.empty:
        return f"{family}: no {unit} to compare"
    defined = rows[rows["diff"].notna()]
    significant = defined[p_column] < ALPHA
    b_better, a_better = defined["diff"] > 0, defined["diff"] < 0
    line = (
        f"{family}: B better on {int(b_better.sum())} of {len(defined)} {unit} "
        f"(p<{ALPHA:g} on {int((b_better & significant).sum())})"
    )
    if a_better.any():
        line += f", A better on {int(a_better.sum())} (p<{ALPHA:g} on "
        line += f"{int((a_better & significant).sum())})"
    if ties := len(defined) - int(b_better.sum()) - int(a_better.sum()):
        line += f", equal on {ties}"
    return line


def _num(value: float, spec: str) -> str:
    """``value`` formatted by ``spec``; "-" (right-aligned) for NaN."""
    width = int(spec.lstrip("+").split(".")[0])
    return f"{'-':>{width}}" if math.isnan(value) else f"{value:{spec}}"


def _p(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:.4f}" if value >= 1e-4 else "<1e-4"


def _parent_param(client: MlflowClient, run: Run, name: str) -> str | None:
    parent = run.data.tags.get(PARENT_TAG)
    try:
        value = client.get_run(parent).data.params.get(name) if parent else None
    except MlflowException:  # the search's run was deleted: its facts are unknown
        return None
    return None if value in (None, "null", "None") else value


class Comparison(NamedTuple):
    header: list[str]  # who A and B are, on what
    retrieval: pd.DataFrame  # compare_retrieval's rows
    semantic: pd.DataFrame  # compare_semantic's rows (empty: no semantic sets)

    def text(self) -> str:
        return format_comparison(self.header, self.retrieval, self.semantic)

    def verdicts(self) -> list[str]:
        return _verdicts(self.retrieval, self.semantic)


def compare_runs(
    client: MlflowClient,
    run_a: Run,
    run_b: Run,
    *,
    data: str | None = None,
    senteval: str | None = None,
    split: str = "test",
    resamples: int = 10_000,
    seed: int = 0,
    device: str = "auto",
    verify: bool = True,
    progress: Progress = silent,
) -> Comparison:
    """Rebuild both runs' snapshot ensembles and test them on the same items: the store
    split ``split`` (``data``, default RUN_A's search's store) and the semantic sets
    (``senteval``, default the search's; ``""`` for none). ``progress`` is told each
    step as it starts (with the seconds since the first). Bad input: AnalysisError."""
    from analysis import _ensemble

    say = _timed(progress)
    say(f"fetching the ensembles of {trial_label(run_a)} (A) and {trial_label(run_b)} (B)")
    weights = [_ensemble.fetch_weights(client, run) for run in (run_a, run_b)]  # before data
    data = data or _parent_param(client, run_a, "data")
    if data is None:
        raise AnalysisError(
            f"{trial_label(run_a)}: its search recorded no data store; pass --data STORE"
        )
    split_name = SPLITS[split]
    say(f"reading the {split_name} split of {data}" + (" (checking its sha256)" if verify else ""))
    items = _read_split(data, split_name, verify=verify)
    for run, w in zip((run_a, run_b), weights, strict=True):
        if w.feature_dim != items.features.shape[1]:
            raise AnalysisError(
                f"run {trial_label(run)} takes {w.feature_dim}-dimensional image "
                f"features, the store {data} has {items.features.shape[1]}: pass --data "
                "the store its search trained on"
            )
    say(f"rebuilding both ensembles (device {device})")
    a, b = (
        _ensemble.build_ensemble(run, w, items, device)
        for run, w in zip((run_a, run_b), weights, strict=True)
    )
    say(
        f"ranking {items.num_images} images and {len(items.captions)} captions with both "
        f"ensembles, then {resamples} bootstrap resamples"
    )
    retrieval = compare_retrieval(a, b, resamples=resamples, seed=seed)
    if senteval is None:
        senteval = _parent_param(client, run_a, "senteval")
    if senteval:
        say(f"scoring the semantic sets of {senteval} with both ensembles")
    semantic = _compare_semantic_sets(a, b, senteval) if senteval else pd.DataFrame()
    say("done")
    header = [
        f"A = {a.label} (run {run_a.info.run_id}), B = {b.label} (run {run_b.info.run_id})",
        f"on the {split_name} split of {data}: {items.num_images} images, "
        f"{len(items.captions)} captions; {resamples} resamples, seed {seed}",
    ]
    if run_a.info.run_id == run_b.info.run_id:
        header.append("A and B are the same run: every difference is 0 and every p is 1")
    if not senteval:
        header.append("no semantic sets: retrieval only")
    return Comparison(header, retrieval, semantic)


def best_of_family(client: MlflowClient, experiment: str, family: str, metric: str) -> Run:
    """The finished trial of ``family`` (``trainables.presets.family_of``) in
    ``experiment`` with the best dev ``metric``; the earliest started on a tie, as the
    report chooses. None of that family: AnalysisError listing the families there."""
    names.selectable(metric)  # a family's best is chosen on dev values only
    trials = [
        r
        for r in all_runs(client, [experiment_id(client, experiment)])
        if r.data.tags.get(ROLE_TAG) == ROLE_TRIAL
    ]
    trials.sort(key=lambda r: r.info.start_time or 0)
    members = [
        r
        for r in trials
        if family_of(r.data.params) == family
        and names.is_finished(r.data.metrics)
        and metric in r.data.metrics
    ]
    if not members:
        there = sorted({family_of(r.data.params) for r in trials}) or ["(no trials)"]
        raise AnalysisError(
            f"{FAMILY_REF}{family}: experiment {experiment!r} has no finished trial of that "
            f"family with {metric}; its families: {', '.join(there)}"
        )
    return max(members, key=lambda r: r.data.metrics[metric])


def _timed(progress: Progress) -> Progress:
    """``progress`` with the seconds since this call before each line."""
    start = time.monotonic()

    def say(line: str) -> None:
        progress(f"[{time.monotonic() - start:5.1f} s] {line}")

    return say


def _read_split(data: str, name: str, *, verify: bool) -> EncodedSplit:
    from storage import StoreError, open_store
    from trainables.data import EncodedSplit
    from trainables.model import CharEncoding

    try:
        stored = open_store(data).read_split(name, verify=verify)
        split = EncodedSplit.from_split(stored, CharEncoding())
    except (StoreError, OSError, ValueError) as err:
        raise AnalysisError(f"--data {data}: {err}") from None
    if split.num_images == 0:
        raise AnalysisError(f"--data {data}: its {name} split has no images to compare on")
    return split


def _compare_semantic_sets(a: Ensemble, b: Ensemble, senteval: str) -> pd.DataFrame:
    from analysis import _ensemble
    from storage import StoreError
    from storage.senteval import load_senteval

    try:
        bench = load_senteval(senteval)
    except (StoreError, OSError, ValueError) as err:
        raise AnalysisError(f"--senteval {senteval}: {err}") from None
    return compare_semantic(
        _ensemble.semantic_scores(a, bench), _ensemble.semantic_scores(b, bench)
    )
