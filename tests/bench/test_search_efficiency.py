"""bench_search_efficiency.py end to end below its smoke size: the three searches run
through the package's own driver and the report reads them back from MLflow."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_smoke_alone_is_the_documented_smoke_and_a_size_flag_given_with_it_wins() -> None:
    from bench.bench_search_efficiency import parse

    sizes = ("images", "scale", "epochs", "margins", "asha_trials", "pareto")

    def of(argv: list[str]) -> tuple[object, ...]:
        args = parse(argv)
        return tuple(getattr(args, name) for name in sizes)

    assert of(["--smoke"]) == (120, 64, 2, [0.1, 0.3], 4, True)
    assert of(["--smoke", "--margins", "0.2", "--asha-trials", "2", "--images", "60"]) == (
        60, 64, 2, [0.2], 2, True
    )  # fmt: skip
    assert of(["--epochs", "3"]) == (2000, 16, 3, [0.1, 0.2, 0.3, 0.4], 16, False)
    assert parse([]).max_concurrent == 2 and parse(["--max-concurrent", "1"]).max_concurrent == 1
    with pytest.raises(SystemExit):
        parse(["--max-concurrent", "0"])


@pytest.mark.slow
def test_the_smoke_benchmark_runs_all_three_searches(
    small_store: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    on_cluster: list[str],
) -> None:
    from bench import bench_search_efficiency
    from gridsearch import spaces

    # the benchmark registers its two spaces in the driver's registry: not for later tests
    monkeypatch.setattr(spaces, "SPACES", dict(spaces.SPACES))

    # The smoke with one margin and 2 ASHA trials: fewer trials, the same three searches;
    # one trial at a time, so that each search's trials share one trial process (its start
    # about 6 CPU-s, this test about 16 CPU-s less than with 2 at once)
    code = bench_search_efficiency.main(
        ["--smoke", "--margins", "0.1", "--asha-trials", "2", "--max-concurrent", "1",
         "--store", small_store, "--out", str(tmp_path / "out"), *on_cluster]
    )  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    rows = {
        line.split(" | ")[0].lstrip("| "): line.split(" | ")
        for line in out.splitlines()
        if line.startswith("| ") and "(" in line.split(" | ")[0]
    }
    # 2 models x 1 margin, every trial to both epochs; ASHA + TPE 2 trials, none past the
    # epoch cap: no more trial-epochs than the grid's 2 x 2
    assert rows["grid (grid)"][1:3] == ["2", "4 (100%)"]
    assert rows["asha-tpe (TPE)"][1] == "2"
    assert int(rows["asha-tpe (TPE)"][2].split()[0]) <= 4
    assert "pareto-tpe (TPE)" in rows
    assert "verdict:" in out and "hypervolume ratio pareto-tpe / grid" in out
