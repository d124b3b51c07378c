"""A search selects on dev data only: run the same search on the embedded world and on a
copy whose every test set is shuffled (the test split's image-caption pairing and every
test gold score of the semantic sets), and it samples the same configurations, makes
the same ASHA decisions, keeps the same ensemble snapshots and crowns the same trials.
The shuffled copy's search runs with --quiet, which must change none of that and print
the summary only. Also: a corrupt shard stops the search before anything starts."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from gridsearch.run import main
from storage import FeatureStore, StoreWriter
from tests.corrupt import corrupt_copy
from trainables import names

# lr_bounds: trials that differ after one epoch, so that ASHA stops some of them; one at a
# time, so that the sampler sees the results in the same order in both searches. 3 trials
# of 2 epochs, the fewest that still make both ASHA decisions: its one rung at epoch 1
# (the smoke test's 1-epoch cycles) stops the trials below the median so far there, and
# the others finish at epoch 2.
SEARCH = [
    "--space", "lr_bounds", "--smoke-test", "--no-dashboard", "--objective", "retrieval",
    "--scheduler", "asha", "--num-samples", "3", "--max-concurrent", "1", "--epochs", "2",
]  # fmt: skip


def _shuffle_column(path: Path, column: int, rng: np.random.Generator, header: bool) -> None:
    """Permute one tab-separated column of a SentEval file (the gold scores)."""
    lines = path.read_text().splitlines()
    head, rows = (lines[:1], lines[1:]) if header else ([], lines)
    fields = [row.split("\t") for row in rows]
    scores = [f[column] for f in fields]
    for f, score in zip(fields, rng.permutation(scores), strict=True):
        f[column] = str(score)
    path.write_text("\n".join(head + ["\t".join(f) for f in fields]) + "\n")


def shuffled_test_copy(store: Path, out: Path, seed: int = 0) -> Path:
    """``store`` rewritten with its test split's features permuted across images and
    every test gold score of its semantic sets permuted; train, val and every dev set
    byte for byte the same."""
    rng = np.random.default_rng(seed)
    source = FeatureStore.open(store)
    m = source.manifest
    writer = StoreWriter(
        out,
        fingerprint={"source": "shuffled test sets", "seed": seed},
        feature_dim=m.feature_dim,
        feature_dtype=m.feature_dtype,
        feature_compression="none",
    )
    records = {}
    for split in ("train", "val", "test"):
        data = source.read_split(split)
        features = data.features[rng.permutation(len(data))] if split == "test" else data.features
        records[split] = [writer.write_shard(split, 0, data.image_ids, features, data.captions)]
    senteval = out / "senteval"
    shutil.copytree(store / m.extras["senteval"], senteval)
    for gold in (senteval / "STS").glob("STS1*-en-test/STS.gs.*.txt"):
        lines = gold.read_text().splitlines()
        gold.write_text("\n".join(rng.permutation(lines)) + "\n")
    _shuffle_column(senteval / "STS" / "STSBenchmark" / "sts-test.csv", 4, rng, header=False)
    _shuffle_column(senteval / "SICK" / "SICK_test_annotated.txt", 3, rng, header=True)
    writer.finish(
        dataset=m.dataset,
        feature_extractor=m.feature_extractor,
        splits=records,
        extras={"senteval": "senteval"},
    )
    return out


def _config(run) -> tuple[str, str]:
    return run.data.params["lr_min"], run.data.params["lr_max"]


def _trials(mlflow_runs, runs_dir: Path, experiment: str) -> dict[tuple[str, str], dict]:
    """Per sampled configuration: its outcome, every dev metric's history, its ensemble's
    snapshot epochs and its test values."""
    client, runs = mlflow_runs(runs_dir, experiment)
    trials = {}
    for run in (r for r in runs if r.data.tags.get("search.role") == "trial"):
        metrics = run.data.metrics
        dev = {
            key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
            for key in metrics
            if key.startswith("dev/")
        }
        trials[_config(run)] = {
            "outcome": run.data.tags["outcome"],
            "dev": dev,
            "snapshots": {k: v for k, v in metrics.items() if k.startswith("ensemble/epoch_")},
            "test": {k: v for k, v in metrics.items() if k.startswith(("test/", "ensemble/"))},
        }
    return trials


def _best(out: str, configs: dict[str, tuple[str, str]]) -> list[tuple[str, str]]:
    """The configurations of the summary's best trials (their ids mapped by ``configs``)."""
    lines = [line for line in out.splitlines() if line.startswith("best ")]
    return [configs[line.split()[2].rstrip(":")] for line in lines]


@pytest.mark.slow
def test_shuffled_test_sets_select_the_same_trials(
    tiny_world: Path, tmp_path: Path, mlflow_runs, capfd: pytest.CaptureFixture[str],
    on_cluster: list[str],
) -> None:  # fmt: skip
    """The shuffled copy's search also runs with --quiet (for scripts): the summary and
    nothing else (no progress lines, no closing commands, no library warnings, not even on
    the file descriptors); the exit status as without it."""
    # the session's world (a search only reads its store), not a build of the same one
    copies = {"honest": tiny_world, "shuffled": shuffled_test_copy(tiny_world, tmp_path / "s")}
    found, best, outs = {}, {}, {}
    for name, store in copies.items():
        runs_dir = tmp_path / f"runs-{name}"
        argv = [*SEARCH, "--data", str(store), "--runs-dir", str(runs_dir), "--experiment", name]
        quiet = ["--quiet"] if name == "shuffled" else []
        assert main([*argv, *quiet, *on_cluster]) == 0
        out, err = capfd.readouterr()
        outs[name] = out
        if quiet:
            assert err.strip() == ""
        found[name] = _trials(mlflow_runs, runs_dir, name)
        _, runs = mlflow_runs(runs_dir, name)
        configs = {
            r.data.tags["tune.trial_id"]: _config(r)
            for r in runs
            if r.data.tags.get("search.role") == "trial"
        }
        best[name] = _best(out, configs)
    honest, shuffled = found["honest"], found["shuffled"]
    assert len(honest) == 3 and honest.keys() == shuffled.keys()  # the same configurations
    outcomes = [t["outcome"] for t in honest.values()]
    assert "stopped_early" in outcomes and "finished" in outcomes  # ASHA decided something
    for config, trial in honest.items():
        other = shuffled[config]
        assert trial["outcome"] == other["outcome"]  # the same ASHA decision
        assert trial["dev"] == other["dev"]  # every dev value at every epoch
        assert trial["snapshots"] == other["snapshots"]  # the same ensemble
    assert best["honest"] == best["shuffled"] and len(best["honest"]) == 2
    finished = [m for m, t in honest.items() if t["outcome"] == "finished"]
    assert any(honest[m]["test"] != shuffled[m]["test"] for m in finished)  # test data moved
    assert names.key(names.TEST, "sts12_16_pearson") in next(iter(honest.values()))["test"]
    # --quiet: its summary first, the same as without it; nothing else of the screen
    counts = next(line for line in outs["honest"].splitlines() if line.startswith("3 trials: "))
    assert outs["shuffled"].splitlines()[0] == counts and "best retrieval" in outs["shuffled"]
    assert "start 1/" in outs["honest"] and "trials done" in outs["honest"]  # what it drops
    assert "mlflow ui" in outs["honest"]
    for noise in ("start 1/", "trials done", "mlflow ui"):
        assert noise not in outs["shuffled"], noise


def test_a_corrupt_shard_stops_the_search_before_it_starts(
    tiny_world: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = corrupt_copy(tiny_world, tmp_path / "store")
    runs_dir = tmp_path / "runs"
    for via in ("object-store", "uri"):
        argv = [*SEARCH, "--data", str(store), "--runs-dir", str(runs_dir), "--data-via", via]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: --data: ")
        assert "images/train-00000.parquet: checksum mismatch" in err[0]
    assert not (runs_dir / "tune").exists()
