"""The store's baselines on every screen of a real search: computed once per store and
cached beside it, held against the best trials in the summary, recorded in the parent
run and drawn by the report."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from analysis.report import main as report_main
from gridsearch._inputs import COMPUTING
from gridsearch.run import main
from gridsearch.settings import SearchSettings
from trainables import names


@pytest.mark.slow
def test_a_search_computes_the_baselines_once_and_shows_them(
    tmp_path: Path, mlflow_runs, capsys: pytest.CaptureFixture[str], on_cluster: list[str]
) -> None:
    # one trial each: enough to reach the summary, the parent run and the report
    args = ["--space", "margin_sweep", "--smoke-test", "--no-dashboard", "--scheduler", "fifo",
            "--num-samples", "1", "--runs-dir", str(tmp_path), "--baselines",
            *on_cluster]  # fmt: skip
    assert main([*args, "--experiment", "first"]) == 0
    out = capsys.readouterr().out
    assert "baselines: computed once for this store in " in out
    assert out.index(COMPUTING) < out.index("baselines: computed once")  # said before the wait
    assert out.index("baselines: computed once") < out.index("joining the Ray cluster at ")
    store = tmp_path / "world-smoke"
    cache = json.loads((store / names.BASELINES_FILE).read_text(encoding="utf-8"))
    ridge = cache["baselines"]["ngram_ridge"]
    summary = next(line for line in out.splitlines() if line.startswith("baselines (test"))
    assert f"char n-gram ridge R@10 mean {ridge[names.key(names.TEST, 'r10_mean')]:.1f}" in summary
    assert "  best retrieval trial " in out and "char n-gram ridge (" in out

    client, runs = mlflow_runs(tmp_path, "first")
    parent = next(r for r in runs if r.data.tags.get("search.role") == "search")
    logged = client.download_artifacts(parent.info.run_id, names.BASELINES_FILE, str(tmp_path))
    assert json.loads(Path(logged).read_text(encoding="utf-8")) == cache["baselines"]

    # the same store: read back
    assert main([*args, "--experiment", "second"]) == 0
    out = capsys.readouterr().out
    assert "baselines: comput" not in out and "baselines (test" in out

    assert report_main(["--runs-dir", str(tmp_path), "--experiment", "first", "--no-log"]) == 0
    folder = tmp_path / "reports" / "first"
    table = pd.read_csv(folder / "tables" / "baselines.csv")
    assert list(table["baseline"]) == ["char n-gram ridge", "char n-gram cosine", "chance"]
    assert table.loc[0, "dev R@10 mean"] == pytest.approx(ridge[names.PRIMARY_RETRIEVAL])
    page = (folder / "report.html").read_text(encoding="utf-8")
    assert "Baselines of this store" in page and "Dashed grey lines: the store&#x27;s" in page


@pytest.mark.parametrize(
    ("flags", "expected"),
    [([], True), (["--smoke-test"], False), (["--smoke-test", "--baselines"], True),
     (["--no-baselines"], False)],
)  # fmt: skip
def test_baselines_are_on_unless_a_smoke_test_or_turned_off(flags, expected, tmp_path) -> None:
    settings = SearchSettings.from_argv(
        ["--space", "margin_sweep", "--runs-dir", str(tmp_path), *flags]
    )
    assert settings.baselines is expected
