"""The report of a search over several parameters and encoder families (the ``encoders``
and ``seeds_presets`` spaces): the trials are logged into a real MLflow store with the
configurations those spaces give (the presets, a run-level size where the family has
one), and the rendered page's structure is checked, not its pixels."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from matplotlib.figure import Figure
from mlflow.tracking import MlflowClient

from analysis import _drawing
from analysis._data import CATEGORICAL, CONTINUOUS, load_search, searched_parameters
from analysis.report import main, searched_text
from gridsearch.tracking import TITLE_WIDTH
from tests.analysis.helpers import html_tables, write_search
from trainables import names
from trainables.config import SMOKE, applicable
from trainables.presets import PRESETS, preset

R, S = names.PRIMARY_RETRIEVAL, names.PRIMARY_SEMANTIC
FAMILIES = ("char_rnn", "word_bow", "vete_rnn", "char_rnn_heads2")
LR_MAX = (5e-4, 2e-3)
# one way of writing an estimate with its 95% interval, everywhere on the page
INTERVAL = re.compile(r"^-?\d+\.\d \[-?\d+\.\d, -?\d+\.\d\]$")


def _config(family: str, **changes: Any) -> dict[str, str]:
    """A trial's logged parameters as the encoders space gives them: the family's preset,
    the run's smoke size where the family has that field, and ``changes``."""
    encoder = PRESETS[family].get("encoder", "char_rnn")
    size = applicable({"hidden_size": SMOKE["hidden_size"]}, encoder)
    values = preset(family, **{**size, **changes}).to_dict()
    return {**{k: str(v) for k, v in values.items()}, "search.family": family}


def _trial(trial_id: str, config: dict[str, str], rank: int) -> dict[str, Any]:
    """Three epochs, epoch 0 (untrained) far below the others, and a finished ensemble."""
    r, s = 40.0 + 3 * rank, 0.50 + 0.01 * rank
    epochs = [{R: 1.0, S: 0.05}, {R: r - 5, S: s}, {R: r, S: s - 0.02}]
    final = {
        names.BEST_RETRIEVAL: r,
        names.BEST_SEMANTIC: s,
        names.key(names.ENSEMBLE, "r10_mean"): r - 1,
        names.key(names.ENSEMBLE, "c2i_r10"): r - 3,
        names.key(names.ENSEMBLE, "i2c_r10"): r + 1,
        names.key(names.ENSEMBLE, "semantic"): s,
        names.key(names.ENSEMBLE, "stsb_pearson"): s,
        names.key(names.ENSEMBLE, "stsb_cosine_pearson"): s + 0.02,
        names.key(names.ENSEMBLE, "sickr_pearson"): s + 0.1,
        names.key(names.ENSEMBLE, "sickr_cosine_pearson"): s + 0.05,
    }
    return {"trial_id": trial_id, "outcome": "finished", "params": config,
            "epochs": epochs, "final": final}  # fmt: skip


ENCODERS_TRIALS = [
    _trial(f"{family}{k}", _config(family, lr_max=lr), rank)
    for rank, (family, (k, lr)) in enumerate((f, kl) for f in FAMILIES for kl in enumerate(LR_MAX))
]
ENCODERS_SPACE = {
    "params": {
        "family": {"type": "categorical", "choices": list(FAMILIES)},
        "lr_max": {"type": "categorical", "choices": list(LR_MAX)},
    }
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two searches: encoders-like (4 families x 2 learning rates) and seeds_presets-like
    (each seed system exactly at its preset, sizes included: one trial each)."""
    root = tmp_path_factory.mktemp("runs")
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    write_search(
        client, root / "artifacts", "encoders", ENCODERS_TRIALS,
        {"space": "encoders", "space_definition": ENCODERS_SPACE},
    )  # fmt: skip
    seeds = [
        _trial(family, {**{k: str(v) for k, v in preset(family).to_dict().items()},
                        "search.system": family}, rank)
        for rank, family in enumerate(("char_rnn", "word_bow", "vete_rnn", "cap2img"))
    ]  # fmt: skip
    space = {"params": {"system": {"type": "categorical", "choices": ["char_rnn", "word_bow"]}}}
    write_search(client, root / "artifacts", "seeds", seeds,
                 {"space": "seeds_presets", "space_definition": space})  # fmt: skip
    return root


def _report(
    runs: Path, experiment: str, out: Path, capsys, monkeypatch
) -> tuple[str, list[Figure]]:
    """The page of ``experiment``'s report and every figure drawn for it."""
    figures: list[Figure] = []
    save = _drawing.save
    monkeypatch.setattr(
        _drawing, "save", lambda fig, path, **kw: figures.append(fig) or save(fig, path, **kw)
    )
    argv = ["--runs-dir", str(runs), "--experiment", experiment, "--out", str(out)]
    assert main([*argv, "--no-log", "--no-family-test"]) == 0
    capsys.readouterr()
    return (out / "report.html").read_text(encoding="utf-8"), figures


def test_searched_parameters_per_family() -> None:
    """The family and lr_max are searched; the fields the presets fix (loss, bow_pooling,
    word_embedding_dim, ...) and the fields a family lacks (hidden_size on word_bow, at
    its default 1024 beside the others' smoke size 8) are not."""
    searched = searched_parameters([t["params"] for t in ENCODERS_TRIALS], ENCODERS_SPACE["params"])
    assert searched.kinds == {"family": CATEGORICAL, "lr_max": CATEGORICAL}
    assert searched.families == {"lr_max": FAMILIES}


def test_a_parameter_searched_in_some_families_only() -> None:
    configs = [_config("char_rnn", margin=m) for m in (0.1, 0.3)]
    configs += [_config("word_bow", margin=0.2), _config("word_bow", margin=0.2)]
    configs += [_config("vete_rnn", hidden_size=n) for n in (16, 32)]
    searched = searched_parameters(configs)
    assert searched.kinds == {
        "family": CATEGORICAL, "hidden_size": CONTINUOUS, "margin": CONTINUOUS,
    }  # fmt: skip
    assert searched.families == {"hidden_size": ("vete_rnn",), "margin": ("char_rnn",)}


def test_one_family_keeps_what_varies_or_what_the_space_defines() -> None:
    configs = [_config("char_rnn", margin=m, rnn_type=t) for m, t in ((0.1, "gru"), (0.3, "lstm"))]
    assert searched_parameters(configs).kinds == {"margin": CONTINUOUS, "rnn_type": CATEGORICAL}
    assert searched_parameters(configs).families == {}
    one = searched_parameters(configs[:1], {"margin": {"type": "float"}})
    assert one.kinds == {"margin": CONTINUOUS}


@pytest.mark.slow  # 5 s or more in the fast tier (BENCHMARKS.md)
def test_the_report_of_an_encoders_search(runs: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    page, figures = _report(runs, "encoders", tmp_path, capsys, monkeypatch)
    sections = re.findall(r'<h2 id="([^"]+)"', page)
    assert sections == [
        "trials", "families", "tradeoff", "sensitivity", "pareto", "importance", "paper-tables",
    ]  # fmt: skip
    record = load_search(MlflowClient(f"sqlite:///{runs / 'mlflow.db'}"), "", "encoders")
    said = searched_text(record)
    assert said == (
        "family (categorical: char_rnn, word_bow, vete_rnn, char_rnn_heads2), "
        "lr_max (categorical) in every family"
    )
    assert f"searched {said}; objective" in page
    # sensitivity: the searched parameters only, not the presets' fields nor hidden_size
    plotted = re.findall(r'alt="sensitivity to ([^"]+)"', page)
    assert plotted == ["family", "lr_max"]
    sensitivity = pd.read_csv(tmp_path / "tables" / "sensitivity.csv")
    assert set(sensitivity["param"]) == {"family", "lr_max"}
    assert {p.stem for p in (tmp_path / "figures").glob("sensitivity_*.png")} == {
        "sensitivity_family", "sensitivity_lr_max",
    }  # fmt: skip

    # the trials table: short headers, in a box that scrolls rather than run off the page
    trials_table = html_tables(page)[0]
    assert trials_table[0] == [
        "trial", "outcome", "family", "lr_max", "epochs", "dev R@10 best", "dev sem. best",
        "test R@10 ens.", "sem. best epoch",
    ]  # fmt: skip
    assert len(trials_table) == 1 + len(ENCODERS_TRIALS)
    assert page.count('<div class="scroll"><table') == len(html_tables(page))

    # legends and titles say what each trial tried
    tried = {
        t["trial_id"]: f"{t['params']['search.family']}, lr_max={float(t['params']['lr_max']):.3g}"
        for t in ENCODERS_TRIALS
    }
    overlay = next(f for f in figures if f.legends)
    legend = [t.get_text() for t in overlay.legends[0].get_texts()]
    assert sorted(legend[: len(tried)]) == sorted(f"{t}: {what}" for t, what in tried.items())
    for trial_id, what in tried.items():
        assert f'alt="{trial_id}: {what}"' in page  # the per-trial figure's caption
    titles = [  # the per-trial figures: one panel, its semantic axis a twin of its R@10 one
        f.axes[0].get_title()
        for f in figures
        if len(f.axes) == 2 and f.axes[0].get_shared_x_axes().joined(*f.axes)
    ]
    assert sorted(" ".join(t.split("\n")) for t in titles) == sorted(
        f"{t}: {what}" for t, what in tried.items()
    )
    assert all(len(line) <= TITLE_WIDTH for t in titles for line in t.split("\n"))
    sensitivity_figure = next(f for f in figures if f.get_suptitle().startswith("lr_max"))
    shown = {t.get_text() for legend in sensitivity_figure.legends for t in legend.get_texts()}
    assert shown == set(FAMILIES)  # one colour per family

    # the Pareto panel over (trial, epoch) pairs: scaled to the trained models
    pareto = next(f for f in figures if any("pairs" in ax.get_title() for ax in f.axes))
    pairs = next(ax for ax in pareto.axes if "pairs" in ax.get_title())
    assert pairs.get_xlim()[0] > 1.0 and pairs.get_ylim()[0] > 0.05  # epoch 0 left out
    marks = [t.get_text() for t in pairs.get_legend().get_texts()]
    assert (
        f"epoch 0, untrained ({len(ENCODERS_TRIALS)} of {len(ENCODERS_TRIALS)} off these axes)"
        in marks
    )

    # one interval notation: "75.0 [70.2, 100.0]", never "±" nor "(+a/-b)"
    assert "±" not in page and "(+" not in page
    families_table = next(t for t in html_tables(page) if t[0][:2] == ["family", "selected on"])
    cells = [c for row in families_table[1:] for c in row[5:]]
    # (R@10 without a readable store has no interval: the value alone)
    assert all(INTERVAL.match(c) or re.match(r"^\d+\.\d$|^-$", c) for c in cells), cells
    assert sum(bool(INTERVAL.match(c)) for c in cells) >= 4 * 3  # the Pearson columns
    table5 = next(t for t in html_tables(page) if t[0][:3] == ["task", "subtask", "n"])
    assert [row[1] for row in table5[1:]] == [
        "test, senteval encoding", "test, cosine", "test", "test, cosine",
    ]  # fmt: skip
    assert [row[0] for row in table5[1:]] == ["STS-B", "", "SICK-R", ""]
    assert all(INTERVAL.match(c) for row in table5[1:] for c in row[3:])


def test_the_report_of_a_seeds_presets_search(
    runs: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """One trial per seed system at its preset: only the family was searched, though
    every preset differs in size, loss, learning rate and more."""
    page, _ = _report(runs, "seeds", tmp_path, capsys, monkeypatch)
    assert "searched family (categorical: char_rnn, word_bow, vete_rnn, cap2img); objective" in page
    assert re.findall(r'alt="sensitivity to ([^"]+)"', page) == ["family"]
    assert html_tables(page)[0][0][:4] == ["trial", "outcome", "family", "epochs"]
    for trial_id in ("char_rnn", "word_bow", "vete_rnn", "cap2img"):
        assert f'alt="{trial_id}: {trial_id}"' in page
