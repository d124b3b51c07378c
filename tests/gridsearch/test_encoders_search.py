"""A real search over the `encoders` space (every encoder family and variant) on a real
local Ray, MLflow sqlite store and the smoke world: each family trains, is recorded and
can be used from its trial's ensemble file through the same paths as the paper's."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from analysis.compare import main as compare_main
from analysis.report import main as report_main
from gridsearch.run import main
from gridsearch.spaces import SMOKE_SIZES
from trainables import names
from trainables.config import TrainConfig
from trainables.encoder import SentenceEncoder
from trainables.presets import PRESETS

SENTENCES = ["A small red circle.", "two blue squares left of a green star"]


def _family(params: dict[str, str]) -> str:
    """The PRESETS name whose settings a trial's params hold (the model sizes aside: the
    smoke test's)."""
    matches = [
        name
        for name, values in PRESETS.items()
        if all(params[k] == str(v) for k, v in values.items() if k not in SMOKE_SIZES)
        and params["attention_heads"] == str(values.get("attention_heads", 1))
        and params["pairing"] == values.get("pairing", "image")
    ]
    assert len(matches) == 1, (params, matches)
    return matches[0]


@pytest.mark.slow
def test_an_encoders_search_trains_every_family_through_the_same_paths(
    tmp_path: Path, mlflow_runs, capsys: pytest.CaptureFixture[str], on_cluster: list[str]
) -> None:
    # two learning rates per family (the grid's first 14 of 21 points): --smoke-test keeps
    # the grid's first 2 points unless told more, and each family's best is still a choice
    # (the report's and analysis.compare's family:NAME must pick the same trial); one at a
    # time, so that one reused trial process trains them all, not two
    grid = 2 * len(PRESETS)
    args = ["--space", "encoders", "--smoke-test", "--num-samples", str(grid), "--no-dashboard",
            "--scheduler", "fifo", "--max-concurrent", "1", "--epochs", "1",
            "--runs-dir", str(tmp_path), "--experiment", "families", *on_cluster]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"{grid} trials: {grid} finished" in out
    assert "registered models:/grounded-encoders@best-retrieval" in out
    client, runs = mlflow_runs(tmp_path, "families")
    trials = [r for r in runs if r.data.tags.get("search.role") == "trial"]
    assert Counter(_family(r.data.params) for r in trials) == {name: 2 for name in PRESETS}
    for run in trials:
        params = run.data.params
        config = TrainConfig.from_dict({k: params[k] for k in TrainConfig.field_names()})
        # the smoke run's n reaches the families that have one, and only those
        assert config.hidden_size == (1024 if config.encoder == "word_bow" else 8)
        assert config.word_embedding_dim == (300 if config.encoder == "char_rnn" else 8)
        assert run.data.tags["outcome"] == "finished"
        assert names.PRIMARY_RETRIEVAL in run.data.metrics
        folder = client.download_artifacts(run.info.run_id, "ensemble.pt", str(tmp_path))
        encoder = SentenceEncoder.load(folder, device="cpu")
        assert encoder.config == config
        vectors = encoder.encode(SENTENCES)
        assert vectors.shape == (2, config.embedding_dim)
    _the_report_groups_the_trials_by_family(tmp_path, capsys)


def _the_report_groups_the_trials_by_family(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The report's family section over the real search: a best row per family and
    selection, and analysis.compare run between the two leading families' best trials;
    the same test through the CLI's family:NAME references."""
    assert report_main(["--runs-dir", str(runs), "--experiment", "families", "--no-log"]) == 0
    folder = runs / "reports" / "families"
    page = (folder / "report.html").read_text(encoding="utf-8")
    best = pd.read_csv(folder / "tables" / "families_best.csv")
    assert Counter(best["family"]) == {name: 2 for name in PRESETS}  # retrieval, semantic
    assert (best["finished"] == 2).all()
    tested = pd.read_csv(folder / "tables" / "families_test_retrieval.csv")
    assert set(tested["metric"]) >= {"c2i_r10", "i2c_r10", "r10_mean"}
    assert 'id="families"' in page and "retrieval: B better on" in page
    leader = best[best["selected on"] == "dev R@10 mean"].sort_values(
        "dev value", ascending=False, kind="stable"
    )
    a, b = leader["family"].iloc[1], leader["family"].iloc[0]
    assert f"python -m analysis.compare family:{a} family:{b} --experiment families" in page
    capsys.readouterr()
    argv = [f"family:{a}", f"family:{b}", "--runs-dir", str(runs), "--resamples", "200"]
    assert compare_main(argv) == 0  # the latest search in runs: this one
    out = capsys.readouterr().out
    trial_a, trial_b = leader["trial_id"].iloc[1], leader["trial_id"].iloc[0]
    assert out.startswith(f"A = {trial_a} (run ") and f"B = {trial_b} (run " in out
