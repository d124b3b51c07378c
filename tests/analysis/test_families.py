"""The report's encoder-family view, on records with known values, and ``analysis.compare``
picking a family's best trial from a real MLflow store."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from analysis import _families, _figures, _tables
from analysis._data import AnalysisError, load_search
from analysis._sections import Output, families_section
from analysis.compare import best_of_family
from analysis.compare import main as compare_main
from tests.analysis.helpers import make_record, write_search
from trainables import names
from trainables.stats import pearson_ci, recall_ci

R, S = names.PRIMARY_RETRIEVAL, names.PRIMARY_SEMANTIC
BEST_R, BEST_S = names.BEST_RETRIEVAL, names.BEST_SEMANTIC


def _ensemble(r10: float, semantic: float) -> dict[str, float]:
    return {
        names.key(names.ENSEMBLE, "r10_mean"): r10,
        names.key(names.ENSEMBLE, "c2i_r10"): r10 - 5,
        names.key(names.ENSEMBLE, "i2c_r10"): r10 + 5,
        names.key(names.ENSEMBLE, "semantic"): semantic,
        names.key(names.ENSEMBLE, "stsb_pearson"): semantic,
        names.key(names.ENSEMBLE, "sickr_pearson"): semantic + 0.05,
    }


# three families; "t" has the best test numbers of char_rnn but not its best dev value,
# "bow2" never finished, the two-head family finished no trial at all
TRIALS = [
    {"trial_id": "c1", "family": "char_rnn", BEST_R: 60.0, BEST_S: 0.60, **_ensemble(58, 0.6)},
    {"trial_id": "t", "family": "char_rnn", BEST_R: 55.0, BEST_S: 0.70, **_ensemble(90, 0.9)},
    {"trial_id": "bow1", "family": "word_bow", BEST_R: 65.0, BEST_S: 0.50, **_ensemble(63, 0.5)},
    {"trial_id": "bow2", "family": "word_bow", BEST_R: 99.0, BEST_S: 0.99, "outcome": "failed"},
    {"trial_id": "h", "family": "char_rnn_heads2", BEST_R: 70.0, "outcome": "stopped_early"},
    {"trial_id": "z", "family": "zeta_custom", BEST_R: 40.0, BEST_S: 0.4, **_ensemble(41, 0.4)},
]


def _record() -> object:
    history = [
        {"trial_id": t["trial_id"], "epoch": e, R: 10.0 * (e + 1), S: 0.5 + 0.01 * e}
        for t in TRIALS
        for e in range(3)
    ]
    return make_record(
        TRIALS,
        history,
        split_images={"test": 200},
        pair_counts={"stsb_pearson": 400, "sickr_pearson": 500},
    )


def test_families_are_ordered_as_the_presets_then_by_name() -> None:
    assert _families.family_order(_record()) == [
        "char_rnn", "word_bow", "char_rnn_heads2", "zeta_custom",
    ]  # fmt: skip


def test_each_familys_best_is_chosen_on_dev_values_among_its_finished_trials() -> None:
    best = _families.best_of_families(_record())
    chosen = {(r["family"], r["selected on"]): r["trial_id"] for r in best.to_dict("records")}
    assert chosen == {
        ("char_rnn", "dev R@10 mean"): "c1",  # not t, whose *test* numbers are better
        ("char_rnn", "dev semantic"): "t",
        ("word_bow", "dev R@10 mean"): "bow1",  # bow2 has better dev values but failed
        ("word_bow", "dev semantic"): "bow1",
        ("zeta_custom", "dev R@10 mean"): "z",
        ("zeta_custom", "dev semantic"): "z",
    }  # the two-head family finished nothing: no row
    row = best.iloc[0]
    assert (row["trials"], row["finished"], row["dev value"]) == (2, 2, 60.0)
    assert (row["r10_mean_ci_low"], row["r10_mean_ci_high"]) == recall_ci(58.0, 200)
    assert (row["stsb_pearson_ci_low"], row["stsb_pearson_ci_high"]) == pearson_ci(0.6, 400)
    assert math.isnan(row["sts12_16_pearson"]) and math.isnan(row["semantic_ci_low"])


def test_the_two_families_leading_on_dev_retrieval_are_the_tested_pair() -> None:
    pair = _families.top_two(_families.best_of_families(_record()))
    assert pair == _families.FamilyPair("char_rnn", "word_bow", "c1", "bow1")
    only_one = make_record(
        [{"trial_id": "a", "family": "char_rnn", BEST_R: 1.0, **_ensemble(1, 0)}]
    )
    assert _families.top_two(_families.best_of_families(only_one)) is None


def test_family_curves_group_every_trial_with_an_epoch() -> None:
    curves = _families.family_curves(_record())
    assert {f: sorted(c) for f, c in curves.items()} == {
        "char_rnn": ["c1", "t"],
        "word_bow": ["bow1", "bow2"],
        "char_rnn_heads2": ["h"],
        "zeta_custom": ["z"],
    }


def test_the_family_table_prints_intervals_in_the_reports_one_notation(tmp_path: Path) -> None:
    table = _tables.format_families(_families.best_of_families(_record()))
    first = table.iloc[0]
    low, high = recall_ci(58.0, 200)
    assert first["test R@10 mean"] == f"58.0 [{low:.1f}, {high:.1f}]"
    r_low, r_high = pearson_ci(0.6, 400)
    assert first["STS-B r x100"] == f"60.0 [{100 * r_low:.1f}, {100 * r_high:.1f}]"
    assert first["STS12-16 r x100"] == "-" and first["finished / trials"] == "2 / 2"
    path = _figures.draw_family_overlay(_families.family_curves(_record()), tmp_path / "f.png")
    assert path.stat().st_size > 10_000


def test_the_section_tests_the_leading_pair_and_says_when_it_cannot(tmp_path: Path) -> None:
    asked = []

    def refuse(pair: _families.FamilyPair) -> object:
        asked.append(pair)
        raise AnalysisError("--data /gone: no such store")

    section = families_section(_record(), Output(tmp_path), refuse)
    assert section is not None and asked == [("char_rnn", "word_bow", "c1", "bow1")]
    html = "".join(section.parts)
    assert "could not run here: --data /gone" in html
    assert "python -m analysis.compare family:char_rnn family:word_bow" in html
    assert (tmp_path / "tables" / "families_best.csv").exists()
    one_family = make_record([{"trial_id": "a", "family": "char_rnn"}])
    assert families_section(one_family, Output(tmp_path)) is None


# -- analysis.compare family:NAME on a real MLflow store -------------------------------


def _trial(
    trial_id: str, family_params: dict[str, str], r: float, s: float, outcome: str = "finished"
) -> dict:
    """A trial run as the tracker leaves one; only a finished trial has ensemble metrics."""
    final = {BEST_R: r, BEST_S: s}
    if outcome == "finished":
        final[names.FINISHED] = r
    params = {"margin": "0.2", **family_params}
    return {"trial_id": trial_id, "outcome": outcome, "params": params, "final": final}


@pytest.fixture()
def families_store(tmp_path: Path) -> MlflowClient:
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    char, bow = {"encoder": "char_rnn"}, {"encoder": "word_bow"}
    heads = {"encoder": "char_rnn", "attention_heads": "2"}
    write_search(client, tmp_path / "artifacts", "families", [
        _trial("a", char, 50.0, 0.70),
        _trial("b", char, 60.0, 0.60),
        _trial("c", heads, 70.0, 0.50),
        _trial("d", bow, 90.0, 0.90, outcome="stopped_early"),
        _trial("e", bow, 40.0, 0.40),
    ])  # fmt: skip
    return client


def test_a_familys_best_finished_trial_is_found_by_dev_metric(
    families_store: MlflowClient,
) -> None:
    def best(family: str, metric: str) -> str:
        run = best_of_family(families_store, "families", family, metric)
        return run.data.tags["tune.trial_id"]

    assert best("char_rnn", BEST_R) == "b" and best("char_rnn", BEST_S) == "a"
    assert best("char_rnn_heads2", BEST_R) == "c"
    assert best("word_bow", BEST_R) == "e"  # d stopped early: no ensemble to compare
    with pytest.raises(AnalysisError, match="families: char_rnn, char_rnn_heads2, word_bow"):
        best("cap2img", BEST_R)
    with pytest.raises(ValueError, match="cannot be selected on"):
        best("char_rnn", names.FINISHED)


def test_compare_cli_names_an_unknown_family_in_one_line(
    families_store: MlflowClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = compare_main(["family:char_rnn", "family:vete_rnn", "--runs-dir", str(tmp_path),
                         "--experiment", "families"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("error: family:vete_rnn: experiment 'families' has no finished")
    with pytest.raises(SystemExit) as exited:
        compare_main(["family:char_rnn", "a", "--select", "best"])
    assert exited.value.code == 2
    assert "--select: invalid choice: 'best'" in capsys.readouterr().err


def test_load_search_gives_every_trial_its_family(
    families_store: MlflowClient, tmp_path: Path
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    record = load_search(families_store, uri, "families")
    assert dict(zip(record.trials["trial_id"], record.trials["family"], strict=True)) == {
        "a": "char_rnn", "b": "char_rnn", "c": "char_rnn_heads2",
        "d": "word_bow", "e": "word_bow",
    }  # fmt: skip


def test_the_trials_section_shows_the_baselines_or_says_there_are_none(tmp_path: Path) -> None:
    from analysis._sections import trials_section

    record = _record()
    html = "".join(trials_section(record, Output(tmp_path)).parts)
    assert "no baselines recorded for this search" in html
    record.baselines["ngram_ridge"] = {R: 59.5, S: 0.678, names.key(names.TEST, "r10_mean"): 57.0}
    html = "".join(trials_section(record, Output(tmp_path)).parts)
    assert "Baselines of this store" in html and "59.50" in html
