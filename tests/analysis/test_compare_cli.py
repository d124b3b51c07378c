"""`python -m analysis.compare` on a search written into a real MLflow store (without
Ray) whose trials hold real ensembles trained on the tiny world: a trial compared with
itself, and what an adversarial user types. Bad input is one `error:` line, exit 2,
before anything is computed."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from analysis._data import progress_printer
from analysis.compare import main
from tests.analysis.helpers import write_search
from trainables.checkpoint import ENSEMBLE_FILE, EnsembleWeights
from trainables.config import TrainConfig
from trainables.data import TrainingData, default_senteval
from trainables.loop import Trainer

QUOTED = 'it\'s "quoted"'  # a trial id with both kinds of quote


class Search(NamedTuple):
    root: Path
    ids: dict[str, str]  # trial id -> MLflow run id


def _ensemble_file(data: TrainingData, seed: int, folder: Path) -> Path:
    config = TrainConfig(hidden_size=8, batch_size=8, epochs=1, snapshot_interval=1,
                         device="cpu", semantic_every=0, threads=1, seed=seed)  # fmt: skip
    trainer = Trainer(config, data)
    for _ in trainer.run():
        pass
    folder.mkdir()
    return EnsembleWeights.from_training_state(trainer.state_dict()).save(folder / ENSEMBLE_FILE)


@pytest.fixture(scope="module")
def search(tiny_world: Path, tmp_path_factory: pytest.TempPathFactory) -> Search:
    """Experiment ``cmp``: finished trials t0 and t1 (ensembles of seeds 0 and 1), a
    stopped one and one named QUOTED (no ensembles); experiment ``other`` has a t0 too."""
    root = tmp_path_factory.mktemp("compare")
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    data = TrainingData.from_store(str(tiny_world))
    trials = [
        {"trial_id": t, "outcome": o, "params": {"margin": m}}
        for t, o, m in (("t0", "finished", 0.2), ("t1", "finished", 0.3),
                        ("stopped", "stopped_early", 0.4), (QUOTED, "finished", 0.5))
    ]  # fmt: skip
    parent = {"data": str(tiny_world), "senteval": default_senteval(str(tiny_world))}
    write_search(client, root, "cmp", trials, parent)
    write_search(client, root, "other", trials[:1], parent)
    runs = client.search_runs([client.get_experiment_by_name("cmp").experiment_id])
    ids = {
        r.data.tags["tune.trial_id"]: r.info.run_id for r in runs if "tune.trial_id" in r.data.tags
    }
    for seed, trial in enumerate(("t0", "t1")):
        client.log_artifact(ids[trial], str(_ensemble_file(data, seed, root / f"w{seed}")))
    return Search(root, ids)


def _run(search: Search, capsys, *args: str) -> tuple[int, str, list[str]]:
    code = main([*args, "--runs-dir", str(search.root), "--device", "cpu"])
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


def test_a_trial_compared_with_itself_is_identical_everywhere(
    search: Search, tmp_path: Path, capsys
) -> None:
    run = search.ids["t0"]
    csv = tmp_path / "same.csv"
    code, out, err = _run(search, capsys, run, run, "--resamples", "200", "--csv", str(csv))
    assert code == 0, err
    assert "A and B are the same run: every difference is 0 and every p is 1" in out
    rows = pd.read_csv(csv)
    retrieval, semantic = rows[rows["kind"] == "retrieval"], rows[rows["kind"] == "semantic"]
    assert (
        len(retrieval) == 11 and (retrieval["diff"] == 0).all()
    )  # R@1,5,10, medr, meanr x 2, mean
    assert (retrieval["p_bootstrap"] == 1.0).all()
    assert len(semantic) > 4 and "sickr_pearson" in set(semantic["metric"])
    assert (semantic["diff"] == 0).all() and (semantic["r_ab"] == 1.0).all()
    for column, value in (("steiger_z", 0.0), ("p_steiger", 1.0), ("williams_t", 0.0),
                          ("p_williams", 1.0)):  # fmt: skip
        assert (semantic[column] == value).all(), column
    *_, retrieval_line, semantic_line = out.rstrip("\n").splitlines()
    assert retrieval_line == "retrieval: B better on 0 of 6 R@K (p<0.05 on 0), equal on 6"
    assert semantic_line == (
        f"semantic: B better on 0 of {len(semantic)} sets (p<0.05 on 0), equal on {len(semantic)}"
    )


def test_two_trials_give_p_values_in_range(search: Search, tmp_path: Path, capsys) -> None:
    csv = tmp_path / "t0-t1.csv"
    code, out, err = _run(
        search, capsys, "t0", "t1", "--experiment", "cmp", "--resamples", "200", "--csv", str(csv)
    )
    assert code == 0, err
    assert out.startswith(f"A = t0 (run {search.ids['t0']}), B = t1 (run {search.ids['t1']})")
    assert "same run" not in out and "Steiger" in out
    rows = pd.read_csv(csv)
    semantic = rows[(rows["kind"] == "semantic") & rows["steiger_z"].notna()]
    assert len(semantic) > 4
    for column in ("steiger_z", "williams_t"):  # every statistic signed as B - A
        assert (np.sign(semantic[column]) == np.sign(semantic["diff"])).all(), column
    retrieval = rows[rows["kind"] == "retrieval"]
    assert (retrieval["ci_low"] <= retrieval["diff"]).all()
    assert (retrieval["diff"] <= retrieval["ci_high"]).all()
    lines = out.rstrip("\n").splitlines()
    assert lines[-2].startswith("retrieval: B better on ") and " of 6 R@K (p<0.05 on " in lines[-2]
    assert lines[-1].startswith("semantic: B better on ") and " sets (p<0.05 on " in lines[-1]


def test_the_verdict_counts_each_family_by_b_minus_a() -> None:
    from analysis.compare import verdict

    rows = pd.DataFrame(
        {
            "metric": ["c2i_r1", "c2i_r5", "c2i_r10", "i2c_r1", "i2c_r5", "i2c_r10", "x"],
            "diff": [2.0, 1.0, 0.5, 3.0, -1.0, 0.0, math.nan],
            "p_bootstrap": [0.01, 0.2, 0.04, 0.5, 0.001, 1.0, math.nan],
        }
    )
    assert verdict("retrieval", rows, "p_bootstrap", "R@K") == (
        "retrieval: B better on 4 of 6 R@K (p<0.05 on 2), A better on 1 (p<0.05 on 1), equal on 1"
    )
    empty = verdict("semantic", rows.iloc[:0], "p_bootstrap", "sets")
    assert empty == "semantic: no sets to compare"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope", "t1"], "'nope': no MLflow run has that run id, tune.trial_id tag or run name"),
        (["t0", "t1"], "'t0' names 2 runs: "),  # in cmp and in other
        (["stopped", "t1", "--experiment", "cmp"],
         "run stopped ("),  # no ensemble: only finished trials keep one
        ([QUOTED, "t1", "--experiment", "cmp"], f"run {QUOTED} ("),  # found, despite the quotes
        (["t0", "t1", "--experiment", "nope"], "--experiment 'nope': no such MLflow experiment"),
        (["t0", "t1", "--experiment", "cmp", "--data", "/no/such/store"], "--data /no/such/store"),
        (["t0", "t1", "--experiment", "cmp", "--senteval", "/no/such/sets"],
         "--senteval /no/such/sets"),
    ],
)  # fmt: skip
def test_runs_and_inputs_that_cannot_be_compared(
    search: Search, capsys, args: list[str], message: str
) -> None:
    code, out, err = _run(search, capsys, *args, "--resamples", "10")
    assert code == 2 and out == ""
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--resamples", "0"], "--resamples: got 0, expected an integer from 1 to 1000000"),
        (["--resamples", "-5"], "--resamples: got -5, expected an integer from 1 to 1000000"),
        (["--resamples", "1000000000"], "--resamples: got 1000000000, expected an integer"),
        (["--seed=-1"], "--seed: got -1, expected an integer from 0 to 2**63 - 1"),
        (["--seed", str(2**64)], "--seed: got 18446744073709551616, expected an integer"),
        (["--device", "cuda:abc"], "--device: got 'cuda:abc', expected auto, cpu, cuda or"),
        (["--device", "gpu"], "--device: got 'gpu', expected auto, cpu, cuda or cuda:N"),
        (["--split", "train"], "argument --split: invalid choice: 'train'"),
        (["--resamples", "many"], "argument --resamples: invalid int value: 'many'"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_options_are_checked_before_anything_is_read(
    tmp_path: Path, capsys, args: list[str], message: str
) -> None:
    """With no tracking store at all: the options fail first, each in one line."""
    try:
        code = main(["a", "b", "--runs-dir", str(tmp_path), *args])
    except SystemExit as stopped:  # argparse's own checks
        code = int(stopped.code or 0)
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines


def test_a_csv_that_cannot_be_written_fails_before_comparing(
    search: Search, tmp_path: Path, capsys
) -> None:
    (tmp_path / "a-dir.csv").mkdir()
    cases = {
        tmp_path / "no-such-dir" / "x.csv": "the folder",
        tmp_path / "a-dir.csv": "is a directory",
    }
    for csv, message in cases.items():
        code, out, err = _run(search, capsys, "t0", "t1", "--csv", str(csv))
        assert code == 2 and out == ""  # not printed then lost: nothing was compared
        assert err == [err[0]] and err[0].startswith(f"error: --csv {csv}: ") and message in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-dir.csv"]


def test_a_missing_semantic_correlation_is_shown_as_undefined() -> None:
    """A constant score makes r NaN: the row says '-' and the table explains it."""
    import numpy as np

    from analysis.compare import compare_semantic, format_comparison

    gold = np.arange(10.0)
    scores_a = {"set": (np.ones(10), gold), "tiny": (gold[:3], gold[:3])}
    scores_b = {"set": (gold + 1, gold), "tiny": (gold[:3] * 2, gold[:3])}
    table = compare_semantic(scores_a, scores_b)
    assert math.isnan(table.loc[0, "r_a"]) and math.isnan(table.loc[0, "steiger_z"])
    assert math.isnan(table.loc[1, "steiger_z"])  # n = 3: no degrees of freedom
    empty = pd.DataFrame(columns=["metric"])
    text = format_comparison([], empty, table)
    assert "- : undefined there" in text and "nan" not in text


def test_a_closed_output_is_no_traceback() -> None:
    """`python -m analysis.compare ... | head -1`: the table's reader goes away."""
    import subprocess
    import sys

    code = "import sys; from analysis._data import print_out; sys.exit(print_out('row\\n' * 10**6))"
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline() == b"row\n"
    process.stdout.close()
    err = process.stderr.read()
    assert process.wait(timeout=60) == 141 and err == b""


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("terminal", "quiet", "shown"), [
    (True, False, True), (True, True, False), (False, False, False),
])  # fmt: skip
def test_progress_lines_only_on_a_terminal_and_not_when_quiet(
    terminal: bool, quiet: bool, shown: bool
) -> None:
    stream = _Terminal() if terminal else io.StringIO()
    progress_printer("compare", quiet, stream)("reading the split")
    assert stream.getvalue() == ("compare: reading the split\n" if shown else "")


def test_help_shows_defaults_and_choices(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for said in ("(default: runs)", "choices: test, val, dev; default: test", "(default: 10000)",
                 "choices: retrieval, semantic; default: retrieval", "--quiet"):  # fmt: skip
        assert said in text
