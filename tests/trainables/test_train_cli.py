"""`python -m trainables.train` given everyday mistakes: a checkpoint path that cannot be
used, nonsense option values, a checkpoint already at or past --epochs. Each is one
`error:` line (exit 2) naming what was wrong, before anything trains, and leaves every
file as it was; a finished checkpoint says so (exit 0)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trainables import checkpoint, names
from trainables.checkpoint import SCHEMA_VERSION, EnsembleWeights, load_training_state
from trainables.config import TrainConfig
from trainables.data import TrainingData
from trainables.loop import Trainer
from trainables.train import main

SMALL = {"hidden_size": 8, "batch_size": 8, "epochs": 2, "snapshot_interval": 1,
         "device": "cpu", "semantic_every": 0, "threads": 1}  # fmt: skip


def _argv(store: Path, **overrides: object) -> list[str]:
    values = {**SMALL, **overrides}
    options = [[f"--{k.replace('_', '-')}", str(v)] for k, v in values.items()]
    return ["--data", str(store), *[part for pair in options for part in pair]]


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, list[str]]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int] | None]:
    """Every entry of ``folder``: a file's bytes and mtime, None for anything else."""
    return {
        p.name: (p.read_bytes(), p.stat().st_mtime_ns) if p.is_file() else None
        for p in folder.iterdir()
    }


def _writes_anyway(folder: Path) -> bool:
    """Whether this process can write in ``folder`` despite its mode (root can)."""
    probe = folder / "probe"
    try:
        probe.write_bytes(b"")
    except PermissionError:
        return False
    probe.unlink()
    return True


@pytest.fixture(scope="module")
def trained(tiny_world: Path) -> Trainer:
    """A 2-epoch run of SMALL's config, finished."""
    trainer = Trainer(TrainConfig(**SMALL), TrainingData.from_store(str(tiny_world)))
    for _ in trainer.run():
        pass
    return trainer


def _bad_checkpoints(trainer: Trainer, folder: Path) -> dict[str, tuple[Path, str]]:
    """Each case: (the --checkpoint path, what its error line says after the path)."""
    good = trainer.save_checkpoint()
    files = {
        "garbage.pt": b"this is not a checkpoint at all\n",
        "truncated.pt": good[: len(good) // 2],
        "empty.pt": b"",
        "newer.pt": checkpoint.to_bytes(
            {**trainer.state_dict(), "schema_version": SCHEMA_VERSION + 1}
        ),
        "ensemble.pt": checkpoint.to_bytes(
            EnsembleWeights.from_training_state(trainer.state_dict()).to_dict()
        ),
        "margin.pt": checkpoint.to_bytes(
            {**trainer.state_dict(), "config": {**trainer.config.to_dict(), "margin": 0.3}}
        ),
        "a-file": b"x",
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (folder / "a-directory.pt").mkdir()
    readable = "not a readable grounded-training-state file"
    return {
        "a directory": (folder / "a-directory.pt", "is a directory; expected a file"),
        "garbage": (folder / "garbage.pt", readable),
        "truncated": (folder / "truncated.pt", f"{readable}: truncated"),
        "empty": (folder / "empty.pt", readable),
        "a newer schema": (folder / "newer.pt", f"schema version {SCHEMA_VERSION + 1}"),
        "an ensemble file": (folder / "ensemble.pt", "a grounded-ensemble file, expected"),
        "another config": (folder / "margin.pt", "written with a different config: margin"),
        "in a missing folder": (folder / "nope" / "c.pt", "its folder"),
        "in a file": (folder / "a-file" / "c.pt", f"its folder {folder / 'a-file'} is not a"),
        "not a regular file": (Path(os.devnull), "is not a regular file"),
    }


CASES = ["a directory", "garbage", "truncated", "empty", "a newer schema", "an ensemble file",
         "another config", "in a missing folder", "in a file", "not a regular file"]  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_a_bad_checkpoint_path_is_one_error_line_and_nothing_trains(
    trained: Trainer, tiny_world: Path, tmp_path: Path, capsys, case: str
) -> None:
    path, message = _bad_checkpoints(trained, tmp_path)[case]
    before = _snapshot(tmp_path)
    code, out, err = _run(capsys, [*_argv(tiny_world), "--checkpoint", str(path)])
    assert code == 2 and out == ""  # no epoch was evaluated or trained
    assert len(err) == 1 and err[0].startswith(f"error: --checkpoint {path}: "), err
    assert message in err[0] and "weights_only=False" not in err[0]
    assert _snapshot(tmp_path) == before  # nothing written, created or changed


@pytest.mark.parametrize("case", ["garbage", "in a missing folder", "another config"])
def test_the_checkpoint_is_checked_before_the_store_is_read(
    trained: Trainer, tmp_path: Path, capsys, case: str
) -> None:
    path, message = _bad_checkpoints(trained, tmp_path)[case]
    code, _, err = _run(capsys, [*_argv(tmp_path / "no-store"), "--checkpoint", str(path)])
    assert code == 2 and err == [err[0]] and message in err[0]  # not the missing store


def test_an_unwritable_checkpoint_folder_fails_before_training(
    tiny_world: Path, tmp_path: Path, capsys
) -> None:
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        if _writes_anyway(folder):
            pytest.skip("this process writes into a read-only folder (root): nothing to test")
        path = folder / "c.pt"
        code, out, err = _run(capsys, [*_argv(tiny_world), "--checkpoint", str(path)])
        assert code == 2 and out == ""
        assert err == [f"error: --checkpoint {path}: cannot write in {folder} (Permission denied)"]
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize(
    ("option", "value", "allowed"),
    [
        ("--device", "cuda:abc", "expected auto, cpu, cuda or cuda:N (N from 0 to 127)"),
        ("--device", "cuda:-1", "expected auto, cpu, cuda or cuda:N"),
        ("--device", "gpu", "expected auto, cpu, cuda or cuda:N"),
        ("--device", "", "expected auto, cpu, cuda or cuda:N"),
        ("--device", "cuda:128", "expected auto, cpu, cuda or cuda:N"),  # torch: cuda:-128
        ("--device", "cuda:01", "expected auto, cpu, cuda or cuda:N"),
        ("--device", "CPU", "expected auto, cpu, cuda or cuda:N"),
        ("--seed", "-1", "expected an integer from 0 to 2**63 - 1"),
        ("--seed", str(2**64), "expected an integer from 0 to 2**63 - 1"),  # torch overflows
        ("--seed", str(2**63), "expected an integer from 0 to 2**63 - 1"),
        ("--seed", "1.5", "expected int"),
        ("--seed", "abc", "expected int"),
        ("--epochs", "-1", "expected an integer from 0 to 2**63 - 1"),
        ("--epochs", "1e30", "expected an integer from 0 to 2**63 - 1"),
        ("--epochs", "inf", "expected int"),
        ("--epochs", "nan", "expected int"),
        ("--hidden-size", "0", "expected an integer from 1 to 2**63 - 1"),
        ("--hidden-size", "-3", "expected an integer from 1 to 2**63 - 1"),
        ("--batch-size", "1", "expected at least 2"),
        ("--threads", "1000000", "expected an integer from 0 to 1024"),
        ("--lr-max", "nan", "expected a finite number > 0.0"),
        ("--lr-max", "inf", "expected a finite number > 0.0"),
        ("--lr-max", "0", "expected a finite number > 0.0"),
        ("--lr-min", "0.5", "lr_min (0.5) must not exceed lr_max (0.001)"),
        ("--margin", "-inf", "expected a finite number >= 0.0"),
        ("--rnn-type", "rnn", "expected one of gru, lstm"),
        ("--precision", "fp16", "expected one of fp32, bf16"),
    ],
)
def test_nonsense_values_name_the_option_and_what_is_allowed(
    tiny_world: Path, tmp_path: Path, capsys, option: str, value: str, allowed: str
) -> None:
    path = tmp_path / "c.pt"
    argv = [*_argv(tiny_world), f"{option}={value}", "--checkpoint", str(path)]  # "=": -inf
    code, out, err = _run(capsys, argv)
    assert code == 2 and out == "" and not path.exists()
    assert len(err) == 1 and err[0].startswith(f"error: {option}: "), err
    assert allowed in err[0]


def test_the_largest_seed_allowed_works_in_torch_and_numpy(tiny_world: Path) -> None:
    config = TrainConfig.from_dict({**SMALL, "seed": str(2**63 - 1), "epochs": 1})
    assert config.seed == 2**63 - 1  # read exactly, not through a float
    assert TrainConfig.from_dict({"seed": "9007199254740993"}).seed == 9007199254740993
    trainer = Trainer(config, TrainingData.from_store(str(tiny_world)))
    assert [int(m["epoch"]) for m in trainer.run()] == [0, 1]


def test_a_model_too_large_for_memory_is_an_error_line(tiny_world: Path, capsys) -> None:
    if Path("/proc/sys/vm/overcommit_memory").read_text().strip() == "1":
        pytest.skip("memory overcommit is unlimited here: the allocation would succeed")
    # the character embedding is allocated first: 40 TB, refused at once
    code, out, err = _run(capsys, _argv(tiny_world, char_embedding_dim=10**11))
    assert code == 2 and out == ""
    assert err[-1].startswith("error: out of memory with hidden_size 8, char_embedding_dim 1000")
    assert sum(line.startswith("error:") for line in err) == 1


def test_a_bad_command_line_is_one_line(capsys) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--hidden-size", "8"])  # no --data
    _, err = capsys.readouterr()
    assert stopped.value.code == 2
    assert err == (
        "error: the following arguments are required: --data "
        "(see python -m trainables.train --help)\n"
    )
    for option, expected in (("--checkpoint", "a file path"), ("--senteval", "a path")):
        with pytest.raises(SystemExit):
            main(["--data", "x", option, ""])  # an unset shell variable, say
        assert capsys.readouterr().err == (
            f"error: argument {option}: expected {expected}, got '' "
            "(see python -m trainables.train --help)\n"
        )


def test_help_lists_choices_and_defaults_once(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "(default: None)" not in text and "--rnn-type gru|lstm" in text
    assert "auto, cpu, cuda or cuda:N" in text and "130 interrupted" in text


# -- a checkpoint at or past --epochs ------------------------------------------------


def test_a_finished_checkpoint_says_so_and_where_its_results_are(
    trained: Trainer, tiny_world: Path, tmp_path: Path, capsys
) -> None:
    path = tmp_path / "c.pt"
    path.write_bytes(trained.save_checkpoint())
    before = _snapshot(tmp_path)
    code, out, err = _run(capsys, [*_argv(tiny_world), "--checkpoint", str(path)])
    assert code == 0 and out == ""
    assert err == [
        f"nothing to train: the checkpoint {path} has finished its 2 epochs (--epochs 2); "
        "every epoch's metrics and the ensemble's test metrics are in its history "
        f"(trainables.checkpoint.load_training_state({str(path)!r})['history']); pass "
        "--epochs above 2 to train it further"
    ]
    assert _snapshot(tmp_path) == before
    assert names.is_finished(load_training_state(path)["history"][-1])


@pytest.mark.parametrize("epochs", [1, 0])
def test_a_checkpoint_past_epochs_is_an_error(
    trained: Trainer, tiny_world: Path, tmp_path: Path, capsys, epochs: int
) -> None:
    path = tmp_path / "c.pt"
    path.write_bytes(trained.save_checkpoint())
    before = _snapshot(tmp_path)
    code, out, err = _run(capsys, [*_argv(tiny_world, epochs=epochs), "--checkpoint", str(path)])
    assert code == 2 and out == ""
    assert err == [
        f"error: --epochs {epochs}: the checkpoint {path} is already at epoch 2; pass "
        "--epochs 2 to end it there, more to train it further, or another --checkpoint to "
        "start a new run"
    ]
    assert _snapshot(tmp_path) == before


def test_a_run_stopped_early_ends_at_its_epoch_with_the_ensemble(
    trained: Trainer, tiny_world: Path, tmp_path: Path, capsys
) -> None:
    """Started for 5 epochs and stopped after 2, then resumed with --epochs 2: epoch 2
    again, now with the same ensemble metrics as a run of 2 epochs; then finished."""
    longer = Trainer(
        TrainConfig(**{**SMALL, "epochs": 5}), TrainingData.from_store(str(tiny_world))
    )
    for metrics in longer.run():
        if metrics["epoch"] == 2:
            break
    path = tmp_path / "c.pt"
    path.write_bytes(longer.save_checkpoint())
    code, out, _ = _run(capsys, [*_argv(tiny_world, epochs=2), "--json", "--checkpoint", str(path)])
    assert code == 0
    [line] = out.splitlines()
    reported, expected = json.loads(line), trained.history[-1]
    assert reported["epoch"] == 2 and names.is_finished(reported)
    for key in (names.key(names.ENSEMBLE, "r10_mean"), names.key(names.ENSEMBLE, "c2i_r1")):
        assert reported[key] == expected[key], key
    assert names.is_finished(load_training_state(path)["history"][-1])
    code, out, err = _run(capsys, [*_argv(tiny_world, epochs=2), "--checkpoint", str(path)])
    assert code == 0 and out == "" and err[0].startswith("nothing to train")


def test_json_lines_are_strict_json_with_null_for_undefined_values():
    from trainables._train_cli import json_line as _json

    line = _json({"dev/semantic": float("nan"), "test/r10_mean": 50.0, "x": float("inf")})
    assert json.loads(line, parse_constant=_refuse) == {
        "dev/semantic": None,
        "test/r10_mean": 50.0,
        "x": None,
    }


def _refuse(constant: str) -> None:
    raise AssertionError(f"non-standard JSON constant {constant}")
