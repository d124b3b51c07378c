"""python -m trainables.encode: text, Parquet and stdin in; .npy, Parquet and text out;
every bad input one error line, and an output file written whole or not at all.

Each test runs the command's ``main`` in the test's process (stdin, stdout and stderr as
a shell gives them) but for two that start ``python -m trainables.encode`` as a user
does: the embeddings printed for piped text, and a bad option's one error line and exit
status; a fresh interpreter is what those two add.

The command runs on its default device (``--device auto``: the GPU where one is visible)
and is compared with CPU embeddings within ``tests.tolerances``' bound for the two."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tests.tolerances import Tolerance, assert_close, tolerance
from trainables import checkpoint
from trainables.checkpoint import EnsembleWeights
from trainables.config import TrainConfig
from trainables.data import TrainingData
from trainables.encode import MAX_CHARS
from trainables.encoder import SentenceEncoder
from trainables.loop import Trainer

SENTENCES = ["A small red circle.", "two blue squares", "", "a green triangle ünd ✓"]
DEFAULT_AGAINST_CPU = ("auto", "cpu")  # the command's default device; the reference's
PRINTED = Tolerance(rtol=1e-6, atol=1e-7)  # text output: "%.7g", 5e-7 relative at most


@pytest.fixture(scope="module")
def model(tiny_world: Path, tmp_path_factory) -> Path:
    config = TrainConfig(hidden_size=8, batch_size=8, epochs=1, snapshot_interval=1,
                         ensemble_size=1, device="cpu", semantic_every=0, threads=1)  # fmt: skip
    trainer = Trainer(config, TrainingData.from_store(str(tiny_world)))
    list(trainer.run())
    folder = tmp_path_factory.mktemp("model")
    return EnsembleWeights.from_training_state(trainer.state_dict()).save(
        folder / checkpoint.ENSEMBLE_FILE
    )


def encode(*args: str | Path, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """``python -m trainables.encode *args`` in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "trainables.encode", *map(str, args)],
        input=stdin,
        capture_output=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def _in_process(
    argv: list[str | Path], capfd: pytest.CaptureFixture[str], stdin: bytes = b""
) -> tuple[int, str, str]:
    """``trainables.encode.main(argv)`` with ``stdin`` as its standard input: its exit
    status (argparse's too), stdout and stderr."""
    from trainables.encode import main

    capfd.readouterr()
    saved, sys.stdin = sys.stdin, io.TextIOWrapper(io.BytesIO(stdin))  # as encode() gives it
    try:
        status = main([str(a) for a in argv])
    except SystemExit as exit_:  # argparse's own exit for a bad command line
        status = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        sys.stdin = saved
    out, err = capfd.readouterr()
    return status, out, err


@pytest.mark.slow
def test_text_in_npy_parquet_and_text_out(
    model: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The files in and out through ``main``; text piped in and printed out by the
    command in its own process, as a user runs it."""
    expected = SentenceEncoder.load(model, device="cpu").encode(SENTENCES)
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    argv = ["--model", model, "--input", sentences, "--output", tmp_path / "e.npy"]
    status, _, err = _in_process(argv, capfd)
    assert status == 0, err
    assert_close(np.load(tmp_path / "e.npy"), expected, devices=DEFAULT_AGAINST_CPU)

    table_in = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": range(4), "text": SENTENCES}), table_in)
    argv = ["--model", model, "--input", table_in, "--column", "text"]
    status, _, err = _in_process([*argv, "--output", tmp_path / "e.parquet"], capfd)
    assert status == 0, err
    table = pq.read_table(tmp_path / "e.parquet")
    assert table.column("sentence").to_pylist() == SENTENCES
    embeddings = np.array(table.column("embedding").to_pylist(), dtype=np.float32)
    assert_close(embeddings, expected, devices=DEFAULT_AGAINST_CPU)

    done = encode("--model", model, stdin="\n".join(SENTENCES).encode())
    assert done.returncode == 0, done.stderr
    rows = [list(map(float, line.split())) for line in done.stdout.decode().splitlines()]
    device = tolerance(DEFAULT_AGAINST_CPU)
    np.testing.assert_allclose(
        np.array(rows),
        expected,
        rtol=max(PRINTED.rtol, device.rtol),
        atol=max(PRINTED.atol, device.atol),
    )


def test_a_progress_line_when_asked(model: Path, capfd: pytest.CaptureFixture[str]) -> None:
    status, _, err = _in_process(["--model", model, "--progress", "always"], capfd, b"a\nb\n")
    assert status == 0 and "encoding [" in err and "2/2" in err


BAD_INPUTS = {
    "not utf-8": (b"fine\n\xff\xfe broken\n", "line 2 is not UTF-8"),
    "a line far too long": (b"x" * (MAX_CHARS + 1), "sentence 1 has 10,001 characters"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_text_is_one_error_line(
    model: Path, case: str, capfd: pytest.CaptureFixture[str]
) -> None:
    data, message = BAD_INPUTS[case]
    status, out, err = _in_process(["--model", model], capfd, data)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and message in err


def test_bad_options_are_one_error_line_and_the_old_output_is_kept(
    model: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "sentences.txt"
    good.write_text("a red circle\n")
    kept = tmp_path / "kept.npy"
    kept.write_bytes(b"precious")
    table = tmp_path / "t.parquet"
    pq.write_table(pa.table({"n": [1, 2]}), table)
    cases: list[tuple[list[str | Path], str]] = [
        (["--model", tmp_path / "nope.pt", "--output", kept], "nope.pt"),
        (["--model", good, "--output", kept], "not a readable grounded-ensemble"),
        (["--model", model, "--input", tmp_path / "missing.txt"], "--input"),
        (["--model", model, "--input", tmp_path], "not a regular file"),
        (["--model", model, "--input", table], "no column 'sentence'"),
        (["--model", model, "--input", table, "--column", "n"], "holds int64"),
        (["--model", model, "--input", good, "--output", tmp_path / "e.csv"], ".npy or .parquet"),
        (["--model", model, "--input", good, "--output", tmp_path / "no" / "e.npy"],
         "does not exist"),
        (["--model", model, "--input", good, "--output", tmp_path], "is a directory"),
        (["--model", model, "--input", good, "--batch-size", "-1"], "--batch-size"),
        (["--model", model, "--input", good, "--device", "cuda:abc"], "cuda:abc"),
        _a_gpu_that_is_not_there(model, good),
        (["--model", model, "--frobnicate"], "unrecognized arguments"),
        (["--input", good], "--model"),
        (["--model", "", "--input", good], "model '': empty; expected"),  # not the cwd
        (["--model", "  ", "--input", good], "model '  ': empty; expected"),
    ]  # fmt: skip
    for i, (args, message) in enumerate(cases):
        if i == 0:  # the command as a user runs it, in its own process
            done = encode(*args)
            status, err = done.returncode, done.stderr.decode()
        else:  # the same entry point in this process: one interpreter start for the rest
            status, _, err = _in_process(args, capfd)
        assert status == 2, (args, err)
        assert err.startswith("error:") and err.count("\n") == 1 and message in err, (args, err)
    assert kept.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.npy", "sentences.txt", "t.parquet"]


def _a_gpu_that_is_not_there(model: Path, good: Path) -> tuple[list[str | Path], str]:
    """``--device`` naming a GPU this machine lacks: cuda:0 without a GPU, else the index
    one past the visible GPUs."""
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    message = f"only {visible} CUDA GPU(s) are visible" if visible else "no CUDA GPU"
    return ["--model", model, "--input", good, "--device", f"cuda:{visible}"], message


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_0_embeds_as_the_cpu_does_within_the_stated_bound(model: Path, tmp_path: Path) -> None:
    expected = SentenceEncoder.load(model, device="cpu").encode(SENTENCES)
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    out = tmp_path / "e.npy"
    done = encode("--model", model, "--input", sentences, "--output", out, "--device", "cuda:0")
    assert done.returncode == 0, done.stderr
    assert_close(np.load(out), expected, devices=("cuda:0", "cpu"))


def test_a_cap2img_model_gives_sentence_or_joint_embeddings(
    tiny_world: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    config = TrainConfig(encoder="cap2img", hidden_size=8, word_embedding_dim=8, batch_size=8,
                         epochs=1, ensemble_size=1, device="cpu", semantic_every=0,
                         threads=1, vocab_min_count=1)  # fmt: skip
    data = TrainingData.from_store(str(tiny_world))
    trainer = Trainer(config, data)
    list(trainer.run())
    path = EnsembleWeights.from_training_state(trainer.state_dict()).save(tmp_path / "e.pt")
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("\n".join(SENTENCES[:2]) + "\n", encoding="utf-8")
    encoder = SentenceEncoder.load(path, device="cpu")
    for space, dim in (("sentence", 8), ("joint", data.feature_dim)):
        out = tmp_path / f"{space}.npy"
        argv = ["--model", path, "--input", sentences, "--output", out, "--space", space]
        status, _, err = _in_process(argv, capfd)
        assert status == 0, err
        vectors = np.load(out)
        assert vectors.shape == (2, dim)
        expected = encoder.encode(SENTENCES[:2], space=space)
        assert_close(vectors, expected, devices=DEFAULT_AGAINST_CPU, err_msg=space)
