"""The report's sections: compute (``analysis._compute`` and friends), write each
figure and CSV table under the output folder, and describe them for the page."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from analysis import _compute, _families, _figures, _tables
from analysis._data import FAMILY, AnalysisError, SearchRecord
from analysis._families import FamilyPair
from analysis._html import Section
from analysis._importance import Importances
from analysis.reference import MARGIN_STABLE_RANGE
from trainables import names

if TYPE_CHECKING:
    from analysis._comparison import Comparison


# runs the significance test of two families' best trials (analysis._comparison.compare_runs)
FamilyTest = Callable[[FamilyPair], "Comparison"]


class Output:
    """Where figures (``figures/*.png``) and tables (``tables/*.csv``) go."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.figures = root / "figures"
        self.tables = root / "tables"
        for folder in (self.figures, self.tables):  # in a fresh folder: report._publish
            folder.mkdir(parents=True, exist_ok=True)  # removes a previous report's files

    def figure(self, name: str) -> Path:
        return self.figures / f"{_slug(name)}.png"

    def csv(self, frame: pd.DataFrame, name: str) -> Path:
        path = self.tables / f"{name}.csv"
        frame.to_csv(path, index=False)
        return path


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


# the trials table's headers, short so that it fits the page (the lead spells them out)
_TRIAL_HEADERS = {
    "trial_id": "trial",
    names.BEST_RETRIEVAL: "dev R@10 best",
    names.BEST_SEMANTIC: "dev sem. best",
    _compute.ENSEMBLE_RETRIEVAL: "test R@10 ens.",
    "best semantic epoch": "sem. best epoch",
}


def trials_section(record: SearchRecord, out: Output) -> Section:
    columns = ["trial_id", "outcome", *record.searched]
    shown = record.trials[columns].copy()
    best_epochs = _compute.best_semantic_epochs(record)
    shown["epochs"] = shown["trial_id"].map(record.history.groupby("trial_id")["epoch"].max())
    for key in (names.BEST_RETRIEVAL, names.BEST_SEMANTIC, _compute.ENSEMBLE_RETRIEVAL):
        shown[key] = record.trials.get(key, math.nan)
    shown["best semantic epoch"] = shown["trial_id"].map(best_epochs)
    out.csv(shown, "trials")
    page = shown.astype(object)
    for param in record.searched:  # a value the trial's family did not search: not shown
        page.loc[~record.searched_by(param), param] = None
    per_family = " (- where the trial's family did not search it)" if record.searched_in else ""
    section = Section(
        "trials",
        "Trials",
        f"Every trial of the search, its searched parameters{per_family} and final metrics: "
        "dev R@10 best = the best dev R@10 mean over its epochs, dev sem. best = the best dev "
        "semantic score, test R@10 ens. = its snapshot ensemble's test R@10 mean, sem. best "
        "epoch = the epoch of its best dev semantic score. tables/trials.csv has every value.",
    ).table(page.rename(columns=_TRIAL_HEADERS), text_columns=2)
    baselines = _compute.baseline_table(record)
    if baselines.empty:
        return section.note(
            "no baselines recorded for this search (run with --no-baselines, or before they "
            "existed): python -m trainables.baselines --data STORE computes them"
        )
    out.csv(baselines, "baselines")
    section.table(
        baselines,
        "Baselines of this store (python -m trainables.baselines): a trial worth keeping "
        "beats them; the trade-off curves draw their dev values",
    )
    against = _compute.semantic_against_baselines(record)
    if against.empty:
        return section
    out.csv(against, "semantic_against_baselines")
    return section.table(
        against,
        "The best-semantic trial's snapshot ensemble against the baselines on the test "
        "semantic score, with its 95% interval (Fisher z of each part over its pairs, "
        "endpoints averaged); Table 5 below has them per subtask",
    )


def tradeoff_section(record: SearchRecord, out: Output) -> Section:
    curves = _compute.tradeoff_curves(record)
    section = Section(
        "tradeoff",
        "Trade-off curves",
        "Dev R@10 mean and dev semantic score against epoch on a log axis, every epoch "
        "ticked, epoch 0 (the untrained model) at the left edge, as in the paper's Fig. 4. "
        "The axes span the trained epochs, where the trials differ: an epoch 0 near chance "
        "sits on the lower edge, its values written under the axes. The star marks each "
        "trial's best-semantic epoch. Grey lines of their own dashes: the store's baselines "
        "(the axes widen to show those near the trials; one far off, such as chance, is "
        "named under the axes instead). " + shapes_text(_compute.tradeoff_shapes(curves)),
    )
    if not curves:
        return section.note("no trial has a recorded dev epoch yet")
    tried = _compute.tried(record)
    families = record.trials.set_index("trial_id").get(FAMILY)
    overlay = _figures.draw_tradeoff_overlay(
        curves,
        out.figure("tradeoff_overlay"),
        _compute.reference_lines(record),
        labels={t: f"{t}: {tried[t]}" for t in curves},
        groups={} if families is None else {t: str(families[t]) for t in curves},
    )
    section.image(overlay, "trade-off curves, all trials")
    gallery = []
    for trial_id, curve in curves.items():
        title = f"{trial_id}: {tried[trial_id]}"
        path = out.figure(f"tradeoff_{trial_id}")
        gallery.append((_figures.draw_trial_tradeoff(curve, path, title), title))
    rows = [
        {
            "trial_id": t,
            "epoch": e,
            "dev R@10 mean": r,
            "dev semantic": s,
            "best semantic epoch": e == c.best_semantic_epoch,
        }
        for t, c in curves.items()
        for e, r, s in zip(c.epochs, c.retrieval, c.semantic, strict=True)
    ]
    out.csv(pd.DataFrame(rows), "tradeoff_curves")
    return section.gallery(gallery)


def shapes_text(shapes: _compute.TradeoffShapes) -> str:
    """What the trials' curves did, said from ``shapes`` (``_compute.tradeoff_shapes``):
    how many show the paper's trade-off (its Fig. 4: the semantic score peaking near epoch
    4, then falling while retrieval keeps rising) and what the others did."""
    total = len(shapes.tradeoff) + len(shapes.still_rising) + len(shapes.both_fell)
    if not total:
        return ""
    parts = []
    for trials, what in (
        (shapes.tradeoff, "peaks before the last epoch and then falls while dev R@10 mean "
                          "rises past its value at that peak, as in the paper's Fig. 4"),
        (shapes.still_rising, "is highest at the last epoch"),
        (shapes.both_fell, "peaks before the last epoch, and dev R@10 mean is no higher "
                           "at the last epoch than at that peak"),
    ):  # fmt: skip
        if trials:
            some = "all" if len(trials) == total else f"{len(trials)} of {total}"
            parts.append(f"in {some}, the dev semantic score {what} ({', '.join(trials)})")
    return (
        f"In these runs (up to epoch {shapes.last}): " + "; ".join(parts) + ". The paper "
        "finds its semantic score peaking near epoch 4 of 32, then falling while retrieval "
        "keeps rising."
    )


def sensitivity_section(record: SearchRecord, out: Output) -> Section:
    table = _compute.sensitivity(record)
    out.csv(table, "sensitivity")
    section = Section(
        "sensitivity",
        "Sensitivity",
        "Each searched parameter against the trials' final metrics with 95% intervals: "
        "R@10 by the normal approximation (n = images of the split), the semantic score "
        "by Fisher-z intervals of its parts at the best-semantic epoch (averaged endpoints)."
        + (
            " With several encoder families, a parameter shows the trials of the families "
            "that searched it, one colour per family."
            if record.searched_in
            else ""
        ),
    )
    if table.empty:
        return section.note(
            "no searched parameter varies across trials, or no trial has final metrics yet"
        )
    for param, kind in record.param_kinds.items():
        rows = table[table["param"] == param]
        section.image(
            _figures.draw_sensitivity(rows, param, kind, out.figure(f"sensitivity_{param}")),
            f"sensitivity to {param}",
        )
        if param == "margin":
            for check in _compute.margin_range_check(table):
                section.text(_range_text(check))
    if table["ci_low"].isna().all():
        section.note(
            "no intervals: the sample sizes (store splits, semantic pair counts) could not be read"
        )
    return section


def _range_text(check: _compute.RangeCheck) -> str:
    low, high = MARGIN_STABLE_RANGE
    where = "inside" if low <= check.best_margin <= high else "outside"
    return (
        f"{check.metric}: best trial at margin {check.best_margin:.3g} ({where} the paper's "
        f"stable range {low}-{high}); best inside {check.best_inside:.4g} "
        f"({check.inside} trials), best outside {check.best_outside:.4g} ({check.outside} trials)."
    )


def pareto_section(record: SearchRecord, out: Output) -> Section:
    trials = _compute.pareto_over_trials(record)
    epochs = _compute.pareto_over_epochs(record)
    out.csv(trials.front, "pareto_trials")
    out.csv(epochs.front, "pareto_epochs")
    section = Section(
        "pareto",
        "Pareto front: retrieval against semantic score",
        "Points no other point beats on both dev R@10 mean and dev semantic score. Over "
        "trials (their best values, possibly from different epochs) and over (trial, "
        "epoch) pairs (each model as it was after that epoch).",
    )
    if trials.points[["retrieval", "semantic"]].isna().all(axis=None):
        return section.note("no trial has both a dev retrieval and a dev semantic score")
    tried = _compute.tried(record)
    labels = {t: f"{t}: {tried[t]}" for t in _compute.tradeoff_curves(record) if t in tried}
    figure = _figures.draw_pareto(trials, epochs, out.figure("pareto"), labels)
    section.image(figure, "Pareto fronts")
    section.table(trials.front, "On the front over trials")
    return section.table(epochs.front, "On the front over (trial, epoch) pairs")


def importance_section(importances: Importances, out: Output) -> Section:
    section = Section(
        "importance",
        "Hyperparameter importance",
        "Optuna's get_param_importances (PED-ANOVA) on the search's study, per objective.",
    )
    out.csv(importances.table, "importance")
    if importances.note:
        section.note(importances.note)
    if not importances.table.empty:
        section.image(
            _figures.draw_importances(importances.table, out.figure("importance")),
            "parameter importances",
        )
        section.table(importances.table, text_columns=2)
    return section


def paper_tables_section(record: SearchRecord, out: Output) -> Section:
    chosen = _compute.best_trials(
        record,
        {names.BEST_RETRIEVAL: "best dev R@10 mean", names.BEST_SEMANTIC: "best dev semantic"},
    )
    section = Section(
        "paper-tables",
        "Paper tables (test split)",
        "The best finished trials (by best dev R@10 mean, the paper's selection, and by "
        "best dev semantic score), their snapshot ensembles on the test split, in the "
        "layout of the paper's Tables 2-3 (retrieval, 95% intervals) and Table 5 (Pearson "
        "r x 100 with Fisher-z 95% intervals).",
    )
    if not chosen:
        return section.note("no finished trial: there are no test metrics to tabulate")
    retrieval = _tables.retrieval_table(record, chosen)
    semantic = _tables.semantic_table(record, chosen)
    out.csv(retrieval.table, "table_retrieval")
    out.csv(semantic.table, "table_semantic")
    section.table(
        _tables.format_retrieval(retrieval.table), "Retrieval (Tables 2-3)", text_columns=2
    )
    section.note(retrieval.note)
    section.table(
        _tables.format_semantic(semantic.table), "Semantic similarity (Table 5)", text_columns=2
    )
    return section.note(semantic.note)


def families_section(
    record: SearchRecord, out: Output, test: FamilyTest | None = None
) -> Section | None:
    """The encoder families side by side (None when the trials are of one family):
    their trade-off curves overlaid, each family's best trial on retrieval and on the
    semantic score, and ``test``'s significance test between the two best families."""
    order = _families.family_order(record)
    if len(order) < 2:
        return None
    section = Section(
        "families",
        "Encoder families",
        'The trials grouped by encoder family (README "Encoder families"): their '
        "trade-off curves, each family's best finished trial chosen on dev values (best dev "
        "R@10 mean, the paper's selection, and best dev semantic score) with its snapshot "
        "ensemble on the test data (95% intervals: normal approximation for R@10, Fisher z "
        "for Pearson r), and a paired significance test between the two families whose "
        "best trials lead on dev retrieval.",
    )
    curves = _families.family_curves(record)
    if curves:
        section.image(
            _figures.draw_family_overlay(
                curves, out.figure("families_tradeoff"), _compute.reference_lines(record)
            ),
            "trade-off curves by encoder family",
        )
    best = _families.best_of_families(record)
    out.csv(best, "families_best")
    if best.empty:
        return section.note("no family has a finished trial yet: nothing to tabulate or test")
    section.table(_tables.format_families(best), "Each family's best trial", text_columns=3)
    pair = _families.top_two(best)
    if pair is None:
        return section.note("fewer than two families have a finished trial: nothing to test")
    command = (
        f"python -m analysis.compare family:{pair.a} family:{pair.b} "
        f"--experiment {record.experiment}"
    )
    if test is None:
        return section.text(f"Test the two leading families: {command}")
    try:
        comparison = test(pair)
    except AnalysisError as err:  # the store or an artifact is not readable here
        return section.note(f"the test ({command}) could not run here: {err}")
    out.csv(comparison.retrieval, "families_test_retrieval")
    out.csv(comparison.semantic, "families_test_semantic")
    section.text(
        f"A = {pair.a} ({pair.trial_a}), B = {pair.b} ({pair.trial_b}), the leader on "
        f"dev R@10 mean; every difference is B - A ({command}). " + " ".join(comparison.header[1:])
    )
    section.table(comparison.retrieval, "Retrieval: paired bootstrap over images, McNemar")
    if not comparison.semantic.empty:
        section.table(comparison.semantic, "Semantic: Steiger's z and Williams' t")
    for line in comparison.verdicts():
        section.text(line)
    return section
