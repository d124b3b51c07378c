"""The recorded benchmark: its table on disk, and its replay against live training and a
live search (real Ray, real MLflow, real Parquet)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from bench import _strategies as strategies
from bench import tabular
from gridsearch import spaces
from trainables import names
from trainables.config import TrainConfig
from trainables.data import TrainingData, default_senteval
from trainables.loop import Trainer
from trainables.semantic import make_semantic


def _curve(variant: str, margin: float, seed: int, values: list[float]) -> tabular.Curve:
    epochs = [
        {
            "epoch": e,
            names.PRIMARY_RETRIEVAL: v,
            names.BEST_RETRIEVAL: max(values[: e + 1]),
            names.PRIMARY_SEMANTIC: v / 100,
            "time/train_s": 1.5,
        }
        for e, v in enumerate(values)
    ]
    config = {"variant": variant, "margin": margin, "seed": seed, "hidden_size": 8}
    return tabular.Curve(variant, margin, seed, config, epochs)


def test_a_table_survives_parquet_and_keeps_the_space_order(tmp_path: Path) -> None:
    curves = [
        _curve("lstm-8-max", 0.1, 0, [5.0, 20.0, 30.5]),
        _curve("gru-8-attention", 0.1, 0, [4.0, 25.0, 28.0]),
        _curve("lstm-8-max", 0.3, 1, [6.0, 10.0, 40.25]),
        _curve("gru-8-attention", 0.3, 1, [3.0, 5.0, 7.0]),
    ]
    variants = {"lstm-8-max": {}, "gru-8-attention": {}}  # the space's order, not sorted
    tabular.RecordedTable(curves, {"variants": variants}).write(tmp_path)
    table = tabular.RecordedTable.read(tmp_path)
    assert table.variants == ("lstm-8-max", "gru-8-attention")
    assert table.margins == (0.1, 0.3) and table.seeds == (0, 1) and table.max_epoch == 2
    assert table.curve("lstm-8-max", 0.3, 1).epochs == curves[2].epochs
    assert table.best(0) == 30.5 and table.best(1) == 40.25
    assert table.grid_cost() == 2 * 2 * 2
    manifest = json.loads((tmp_path / tabular.MANIFEST_FILE).read_text())
    assert manifest["rows"] == 12 == pq.read_metadata(tmp_path / tabular.TABLE_FILE).num_rows
    with pytest.raises(KeyError, match=r"margin 0\.2"):
        table.curve("lstm-8-max", 0.2, 0)


def test_a_table_with_a_missing_epoch_is_refused(tmp_path: Path) -> None:
    tabular.RecordedTable([_curve("gru-8-attention", 0.1, 0, [1.0, 2.0, 3.0])]).write(tmp_path)
    rows = pq.read_table(tmp_path / tabular.TABLE_FILE).to_pylist()
    rows[1]["epoch"] = 5  # epochs 0, 5, 2: epoch 1 is missing
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / tabular.TABLE_FILE)
    with pytest.raises(ValueError, match=r"not 0\.\.n"):
        tabular.RecordedTable.read(tmp_path)


def _without_time(metrics: dict[str, float]) -> dict[str, float]:
    """Everything but the clock's readings (seconds and captions per second)."""
    return {k: v for k, v in metrics.items() if not (k.startswith("time/") or k.endswith("_per_s"))}


@pytest.mark.slow
def test_the_replay_gives_live_training_s_metrics_and_a_live_search_s_decisions(
    tiny_world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, on_cluster: list[str]
) -> None:
    from bench.bench_search_efficiency import scaled_variants
    from gridsearch.driver import run_search
    from gridsearch.settings import SearchSettings, parse_args

    monkeypatch.setattr(spaces, "SPACES", dict(spaces.SPACES))  # the bench's spaces stay here
    every = scaled_variants(64)
    # two configurations, the stronger at the first rung first (on this world at seed 0,
    # dev R@10 best 75.8 against 54.2 after epoch 1): the live search's two space-filling
    # starts (seed 0) take the variants in this order, so ASHA stops the second there
    variants = {v: every[v] for v in ("gru-8-attention", "lstm-16-max")}
    margins = (0.3,)
    # recorded one trial at a time: its two trials share one trial process
    curves = tabular.record_problem(
        str(tiny_world), variants, margins, epochs=2, cycle_epochs=1, seeds=[0],
        scratch=tmp_path / "record", write=lambda line: None, address=on_cluster[1],
        concurrent=1,
    )  # fmt: skip
    tabular.RecordedTable(curves, {"variants": variants, "cycle_epochs": 1}).write(tmp_path / "t")
    table = tabular.RecordedTable.read(tmp_path / "t")
    assert len(table.curves) == 2 and table.max_epoch == 2

    # 1. Live training of a recorded config gives the recorded metrics, epoch by epoch.
    recorded = table.curve("lstm-16-max", 0.3, 0)
    config = TrainConfig.from_dict({k: v for k, v in recorded.config.items() if k != "variant"})
    threads = torch.get_num_threads()
    try:
        data = TrainingData.from_store(str(tiny_world))
        semantic = make_semantic(default_senteval(str(tiny_world)), config.evaluation, config.run)
        live = list(Trainer(config, data, semantic).run())
    finally:
        torch.set_num_threads(threads)
    assert len(live) == len(recorded.epochs)
    for now, then in zip(live, recorded.epochs, strict=True):
        now, then = _without_time(now), _without_time(then)
        assert now.keys() == then.keys()
        assert [k for k in now if now[k] != then[k]] == []

    # 2. A live ASHA search and its replay, one trial at a time, decide the same: the same
    # configs drawn, the same trials stopped at the same epochs. In the recording's runs
    # folder, as a user's next search would be: its MLflow database is made once, not twice.
    argv = [
        "--space", "bench_tpe", "--data", str(tiny_world), "--epochs", "2", "--seed", "0",
        "--scheduler", "asha", "--num-samples", "2", "--max-concurrent", "1",
        "--cpus-per-trial", "1", "--no-dashboard", "--no-baselines",
        "--runs-dir", str(tmp_path / "record"), "--experiment", "live", *on_cluster,
    ]  # fmt: skip
    settings = SearchSettings.from_args(parse_args(argv))
    run_search(settings)
    live_trials = tabular.read_trials(settings.experiment_path, 0, variants)
    live_decisions = sorted((c.variant, c.margin, len(c.epochs) - 1) for c in live_trials)
    import ray

    ray.init(address=on_cluster[1], log_to_driver=False, configure_logging=False)
    try:
        replayed = strategies.run_one(
            "ours-asha", table, 0, budget=100, time_scale=0.0, scratch=tmp_path / "replay",
            objective="retrieval", trials=2, concurrent=1,
        )  # fmt: skip
    finally:
        ray.shutdown()
    assert replayed.decisions() == live_decisions
    assert any(epochs < 2 for *_, epochs in live_decisions), "ASHA stopped nothing: no test"
    # and what the replay reported is the table's
    for trial, epoch, best, _ in replayed.reports:
        variant, margin = replayed.configs[trial]
        assert best == table.curve(variant, margin, 0).epochs[epoch][names.BEST_RETRIEVAL]


def test_seed_agreement_reads_the_ranking_across_seeds() -> None:
    finals = {0: [10.0, 20.0, 30.0, 40.0], 1: [12.0, 18.0, 40.0, 39.8]}
    curves = [
        _curve(f"v{k}", 0.1, seed, [0.0, value])
        for seed, values in finals.items()
        for k, value in enumerate(values)
    ]
    lines = tabular.seed_agreement(tabular.RecordedTable(curves))
    assert lines[0] == "seeds 0 and 1: Spearman 0.800 over 4 configs"
    assert "seed 0's best (v3, margin 0.1: 40.00) at seed 1: 39.80 = 99.5%" in lines[1]
    assert lines[1].endswith("(within 1%)")
    assert "seed 1's best (v2, margin 0.1: 40.00) at seed 0: 30.00 = 75.0%" in lines[2]
    assert lines[2].endswith("(NOT within 1%)")
    assert lines[3] == "  top-4 overlap: 4 of 4"
    assert lines[4] == "  the top 4's lowest at 25.0% (seed 0) and 30.0% (seed 1) of the best"


def test_reliability_splits_the_seed_s_move_from_the_configs_spread() -> None:
    # configs at 10, 20, 30, each seed 1 off: MSW = 2, MSB = 2 * 200 / 2 = 200
    line = tabular.reliability([[9.0, 11.0], [21.0, 19.0], [29.0, 31.0]])
    assert "an sd of 1.414," in line  # sqrt(MSW)
    assert "an sd of 9.95 beyond it" in line  # sqrt((MSB - MSW) / 2)
    assert line.endswith("ICC(1): 0.980")  # (200 - 2) / (200 + 2)
    # scores the seed alone decides: nothing beyond the seed's move, no correlation to expect
    noise = tabular.reliability([[1.0, 2.0], [2.0, 1.0], [1.0, 2.0], [2.0, 1.0]])
    assert "an sd of 0 beyond it" in noise
    assert float(noise.rsplit(" ", 1)[1]) < 0


def test_with_three_seeds_the_others_mean_is_valued_at_the_seed_left_out() -> None:
    finals = {0: [10.0, 40.0, 39.0], 1: [10.0, 30.0, 40.0], 2: [10.0, 38.0, 36.0]}
    curves = [
        _curve(f"v{k}", 0.1, seed, [0.0, value])
        for seed, values in finals.items()
        for k, value in enumerate(values)
    ]
    lines = tabular.seed_agreement(tabular.RecordedTable(curves))
    assert sum(line.startswith("seeds ") for line in lines) == 3  # every pair
    assert lines[-4:-1] == [
        "the best on the mean of seeds 1, 2 (v2, margin 0.1: 38.00) at seed 0: 39.00 = 97.5% "
        "of seed 0's best (NOT within 1%)",
        "the best on the mean of seeds 0, 2 (v1, margin 0.1: 39.00) at seed 1: 30.00 = 75.0% "
        "of seed 1's best (NOT within 1%)",
        "the best on the mean of seeds 0, 1 (v2, margin 0.1: 39.50) at seed 2: 36.00 = 94.7% "
        "of seed 2's best (NOT within 1%)",
    ]
    two = tabular.seed_agreement(tabular.RecordedTable([c for c in curves if c.seed < 2]))
    assert not any("the mean" in line for line in two)
    assert lines[-1].startswith("over seeds and configs:") and two[-1].startswith("over seeds")


_PROBLEM = {"problem": "paper_margin", "images": 10, "scale": 32, "epochs": 1,
            "cycle_epochs": 1, "variants": {"v0": {}, "v1": {}}, "margins": [0.1]}  # fmt: skip


def _part(folder: Path, seeds: list[int], store: str = "s", **problem: object) -> Path:
    curves = [_curve(v, 0.1, seed, [0.0, 10.0 + seed]) for seed in seeds for v in ("v0", "v1")]
    manifest = {**_PROBLEM, **problem, "seeds": seeds, "command": f"record --seeds {seeds}",
                "created": "then", "commit": "c", "store_manifest_sha256": store}  # fmt: skip
    tabular.RecordedTable(curves, manifest).write(folder)
    return folder


def test_join_makes_one_table_of_a_problem_recorded_in_parts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _part(tmp_path / "a", [0, 1])
    b = _part(tmp_path / "b", [2], store="other")
    out = tmp_path / "joined"
    assert tabular.main(["join", "--table", str(a), "--table", str(b), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"6 curves, seeds [0, 1, 2] -> {out} (recorded on 2 stores")
    joined = tabular.RecordedTable.read(out)
    assert joined.seeds == (0, 1, 2) and joined.configs() == [("v0", 0.1), ("v1", 0.1)]
    assert (
        joined.curve("v1", 0.1, 2).epochs
        == tabular.RecordedTable.read(b).curve("v1", 0.1, 2).epochs
    )
    parts = joined.manifest["parts"]
    assert [p["seeds"] for p in parts] == [[0, 1], [2]]
    assert [p["store_manifest_sha256"] for p in parts] == ["s", "other"]
    assert all(joined.manifest[k] == v for k, v in _PROBLEM.items())
    assert "store_manifest_sha256" not in joined.manifest  # only the parts name stores
    again = tabular.join(
        {"joined": joined, "c": tabular.RecordedTable.read(_part(tmp_path / "c", [3]))}
    )
    assert [p["seeds"] for p in again.manifest["parts"]] == [[0, 1], [2], [3]]


@pytest.mark.parametrize(
    ("second", "expected"),
    [
        ({"seeds": [1]}, "both hold seed 1"),
        ({"seeds": [2], "epochs": 2}, "records another problem than"),
        ({"seeds": [2], "margins": [0.2]}, "its margins is [0.2], expected [0.1]"),
        ({"seeds": [2], "variants": {"v0": {}, "v1": {"lr_max": 1}}}, "its variants is"),
        ({"seeds": [2], "images": 20}, "its images is 20, expected 10"),
        (None, "expected two or more recordings, got 1"),
        ("out exists", "error: --out: "),
    ],
)
def test_join_s_bad_parts_are_one_error_line(
    second: object, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Parts that are not one problem at different seeds: one error line, nothing written."""
    a = _part(tmp_path / "a", [0, 1])
    out = tmp_path / "joined"
    argv = ["join", "--table", str(a), "--out", str(out)]
    if isinstance(second, dict):
        seeds = second.pop("seeds")
        argv += ["--table", str(_part(tmp_path / "b", seeds, **second))]
    elif second == "out exists":
        argv += ["--table", str(_part(tmp_path / "b", [2])), "--out", str(a)]
    before = (a / tabular.TABLE_FILE).read_bytes()
    assert tabular.main(argv) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("error: --") and expected in line, line
    assert not captured.out and not out.exists()
    assert (a / tabular.TABLE_FILE).read_bytes() == before


@pytest.mark.parametrize("kind", ["missing", "empty", "not parquet", "no manifest"])
def test_a_table_flag_without_a_whole_recording_is_one_error_line(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--table`` (and ``--warm-table``) naming a folder that holds no whole recording:
    one error line naming the flag and the folder, exit 2, for every command reading one."""
    from bench import bench_strategies

    folder = tmp_path / "table"
    recorded = Path(__file__).resolve().parents[2] / "bench" / "recorded" / "lr_batch"
    if kind != "missing":
        folder.mkdir()
    if kind == "not parquet":
        (folder / tabular.TABLE_FILE).write_text("variant,margin\n")
        (folder / tabular.MANIFEST_FILE).write_text("{}")
    if kind == "no manifest":
        (folder / tabular.TABLE_FILE).write_bytes((recorded / tabular.TABLE_FILE).read_bytes())
    runs = [
        (tabular.main, ["seeds", "--table", str(folder)], "--table"),
        (tabular.main, ["mean", "--table", str(folder), "--out", str(tmp_path / "o")], "--table"),
        (tabular.main, ["join", "--table", str(recorded), "--table", str(folder), "--out",
                        str(tmp_path / "j")], "--table"),
        (bench_strategies.main, ["--table", str(folder)], "--table"),
        (bench_strategies.main, ["--table", str(recorded), "--warm-table", str(folder)],
         "--warm-table"),
    ]  # fmt: skip
    for command, argv, flag in runs:
        assert command(argv) == 2, argv
        captured = capsys.readouterr()
        (line,) = captured.err.strip().splitlines()
        assert line.startswith(f"error: {flag}: {folder} holds no whole recording"), line
        assert "Traceback" not in captured.err and not captured.out


def test_seeds_reads_any_recorded_metric_and_names_one_it_lacks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``seeds --metric``: the agreement of any metric the trials recorded at their last
    epoch (a test metric, to see what a dev set's noise costs); one they lack is one
    error line that lists those they have."""
    folder = Path(__file__).resolve().parents[2] / "bench" / "recorded" / "paper_margin_world4"
    argv = ["seeds", "--table", str(folder), "--metric", "test/semantic"]
    assert tabular.main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("test/semantic at the last epoch:\nseeds 0 and 1: Spearman 0.884 ")
    assert names.BEST_SEMANTIC not in out  # only what was asked
    assert tabular.main([*argv, "--metric", "test/nothing"]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("error: --metric: 'test/nothing' is not recorded at every trial's")
    assert "test/semantic, " in line and not captured.out  # checked before any is printed


@pytest.mark.parametrize(
    ("problem", "variants", "margins", "seeds"),
    [
        ("paper_margin", 8, 10, (0, 1)),
        ("paper_margin_world4", 8, 5, (0, 1)),  # the same models on the redesigned world
        ("paper_margin_world3_2000", 8, 5, (0, 1)),  # the same at the main job's world size
        ("paper_margin_world4_4000", 8, 5, (0, 1)),  # and at twice that
        ("paper_margin_world4_dev1000", 8, 5, (0, 1, 2)),  # 1,600 training images, Flickr8k's dev
        ("paper_margin_world4_train6000", 8, 5, (0, 1, 2)),  # Flickr8k's sizes: 6,000/1,000/1,000
        ("lr_batch", 2 * 4 * 2 * 3, 1, (0, 1, 2)),  # 2 models x lr_max x lr_min x batch
        ("lr_batch_500", 2 * 4 * 2 * 3, 1, (0, 1)),  # the same on a 500-image world
    ],
)
def test_the_recorded_problems_in_the_repository_are_whole(
    problem: str, variants: int, margins: int, seeds: tuple[int, ...]
) -> None:
    import hashlib

    folder = Path(__file__).resolve().parents[2] / "bench" / "recorded" / problem
    table = tabular.RecordedTable.read(folder)
    digest = hashlib.sha256((folder / tabular.TABLE_FILE).read_bytes()).hexdigest()
    assert digest == table.manifest["table_sha256"]
    assert len(table.variants) == variants and len(table.margins) == margins
    assert table.seeds == seeds and table.max_epoch == table.manifest["epochs"] == 4
    assert len(table.curves) == variants * margins * len(seeds)  # every config and seed
    for curve in table.curves.values():
        assert curve.config["variant"] == curve.variant and curve.config["seed"] == curve.seed
        values = [e[names.BEST_RETRIEVAL] for e in curve.epochs]
        assert values == sorted(values)  # a running best never falls


def test_the_seed_mean_problem_averages_every_epoch_over_the_seeds(tmp_path: Path) -> None:
    curves = [
        _curve("v0", 0.1, 0, [0.0, 10.0, 30.0]),
        _curve("v0", 0.1, 1, [0.0, 20.0, 10.0]),
        _curve("v0", 0.1, 2, [0.0, 60.0, 50.0]),
        _curve("v1", 0.1, 0, [0.0, 40.0, 41.0]),
        _curve("v1", 0.1, 1, [0.0, 2.0, 5.0]),
        _curve("v1", 0.1, 2, [0.0, 3.0, 4.0]),
    ]
    table = tabular.RecordedTable(curves, {"variants": {"v0": {}, "v1": {}}, "table_sha256": "x"})
    mean = tabular.seed_mean(table, [0, 1])
    assert mean.seeds == (0,) and mean.configs() == table.configs()
    epochs = mean.curve("v0", 0.1, 0).epochs
    assert [e[names.PRIMARY_RETRIEVAL] for e in epochs] == [0.0, 15.0, 20.0]
    assert [e[names.BEST_RETRIEVAL] for e in epochs] == [0.0, 15.0, 25.0]  # mean of bests
    assert epochs[2][names.spread(names.PRIMARY_RETRIEVAL)] == pytest.approx(14.142, abs=1e-3)
    assert epochs[1]["time/train_s"] == 1.5  # one trial's cost, not the seeds' sum
    assert mean.best(0) == 25.0  # v0 on average, though v1 is seed 0's best
    assert mean.manifest["seed_mean_of"] == [0, 1] and mean.manifest["seeds"] == [0]
    mean.write(tmp_path)
    again = tabular.RecordedTable.read(tmp_path)
    assert again.curve("v1", 0.1, 0).epochs == mean.curve("v1", 0.1, 0).epochs
    assert tabular.seed_mean(table).best(0) == pytest.approx((30 + 20 + 60) / 3)
    for seeds in ([0], [0, 7], [1, 1]):
        with pytest.raises(ValueError, match="two or more different seeds of the table's"):
            tabular.seed_mean(table, seeds)


@pytest.mark.parametrize("seeds", ["0,x", "0", "0,9", "1.5,2", ",", "0,0"])
def test_mean_s_bad_seeds_are_one_error_line(
    seeds: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = Path(__file__).resolve().parents[2] / "bench" / "recorded" / "lr_batch"
    argv = ["mean", "--table", str(folder), "--out", str(tmp_path / "out"), "--seeds", seeds]
    assert tabular.main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: --seeds: ")
    assert not (tmp_path / "out").exists()


def test_a_bench_s_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = Path(tabular.__file__)
    argv = ["mean", "--table", str(script.parent / "recorded" / "lr_batch"), "--out",
            str(tmp_path / "out"), "--seeds", "0,x"]  # fmt: skip
    done = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: --seeds: got '0,x', expected comma-separated integers"
    ]
