"""Bad options and bad ``--out`` locations: one ``error:`` line naming the option or the
path, exit status 2, never a traceback, and nothing written.

Before: ``--seed -1`` and ``--seed 2**64`` ended in a ``ValueError`` traceback, ``--out``
naming a file in a ``NotADirectoryError`` traceback, an unreachable ``s3://`` URI in an
``OSError`` traceback from pyarrow, and argparse's own errors printed a usage block.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from storage import build
from storage import inspect as inspect_cli
from tests.storage.cli_runs import (
    assert_refused,
    flickr_set,
    karpathy_args,
    run_main,
    run_module,
)

BAD_SEEDS = ["-1", str(-(2**70)), str(2**63), str(2**64), str(2**200)]
BAD_SCENE_COUNTS = ["0", "-3", "9", "1000001", str(2**64)]
NOT_INTEGERS = ["1.5", "ten", "", "0x10", "1e3"]
# No network is needed: pyarrow fails to resolve the bucket, or to reach a closed port.
UNREACHABLE = [
    "s3://bucket/x",
    "s3://bucket/x?region=us-east-1&scheme=http&endpoint_override=127.0.0.1:9",
]
BAD_URIS = ["foo://x", "file://relative/x", "://x", "hdfs://namenode:1/x"]
_NO_AWS_LOOKUPS = {"AWS_EC2_METADATA_DISABLED": "true"}  # no instance-metadata credentials


def _synthetic(out: Path | str, *extra: str) -> list[str]:
    return ["synthetic", "--images", "10", "--out", str(out), *extra]


@pytest.mark.parametrize("seed", BAD_SEEDS)
def test_a_seed_out_of_range_is_one_error_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], seed: str
) -> None:
    out = tmp_path / "store"
    outcome = run_main(build.main, _synthetic(out, "--seed", seed), capfd)
    assert_refused(outcome, f"--seed: expected an integer from 0 to {2**63 - 1}, got {seed}")
    assert not out.exists()


@pytest.mark.parametrize("images", BAD_SCENE_COUNTS)
def test_a_scene_count_out_of_range_is_one_error_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], images: str
) -> None:
    out = tmp_path / "store"
    argv = ["synthetic", "--images", images, "--out", str(out)]
    assert_refused(run_main(build.main, argv, capfd), "--images: expected an integer from 10 to")
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--val-images", "0"], "--val-images: expected an integer from 1 to 9, got 0"),
        (["--test-images", "-2"], "--test-images: expected an integer from 1 to 9, got -2"),
        (["--val-images", "10"], "--val-images: expected an integer from 1 to 9, got 10"),
        (["--test-images", str(2**64)], "--test-images: expected an integer from 1 to 9"),
        (["--val-images", "5", "--test-images", "5"], "5 val and 5 test images leave none"),
        (["--test-images", "9"], "--images 10: 1 val and 9 test images leave none of 10"),
    ],
)
def test_split_sizes_that_leave_a_split_empty_are_refused(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], extra: list[str], says: str
) -> None:
    out = tmp_path / "store"
    assert_refused(run_main(build.main, _synthetic(out, *extra), capfd), says)
    assert not out.exists()


@pytest.mark.parametrize(
    "flag", ["--images", "--seed", "--shard-size", "--batch-size", "--val-images", "--test-images"]
)
@pytest.mark.parametrize("value", NOT_INTEGERS)
def test_a_non_integer_is_one_error_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    outcome = run_main(build.main, [*_synthetic(tmp_path / "o"), flag, value], capfd)
    line = assert_refused(outcome, f"argument {flag}: invalid int value: {value!r}")
    assert line.endswith("(see python -m storage.build synthetic --help)")


@pytest.mark.parametrize(
    ("flag", "value", "least"),
    [
        ("--shard-size", "0", 1),
        ("--shard-size", "-4", 1),
        ("--batch-size", "0", 1),
        ("--workers", "-1", 0),
    ],
)
def test_sizes_below_their_minimum_are_refused(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], flag: str, value: str, least: int
) -> None:
    expected = f"{flag}: expected an integer of at least {least}, got {value}"
    outcome = run_main(build.main, [*_synthetic(tmp_path / "o"), flag, value], capfd)
    assert_refused(outcome, expected)
    json_path, images = flickr_set(tmp_path / "k")
    argv = [*karpathy_args(json_path, images, tmp_path / "o2"), flag, value]
    assert_refused(run_main(build.main, argv, capfd), expected)
    assert not (tmp_path / "o").exists() and not (tmp_path / "o2").exists()


def test_a_worker_count_that_would_fork_thousands_is_refused(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    for argv in (_synthetic(tmp_path / "o"), karpathy_args(*flickr_set(tmp_path), "o2")):
        outcome = run_main(build.main, [*argv, "--workers", "100000"], capfd)
        assert_refused(outcome, "--workers: expected at most 256 processes, got 100000")


@pytest.mark.parametrize("content", [b"", b"precious notes\n"])
def test_out_naming_an_existing_file_is_refused_and_the_file_kept(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], content: bytes
) -> None:
    target = tmp_path / "notes.txt"
    target.write_bytes(content)
    outcome = run_main(build.main, _synthetic(target), capfd)
    assert_refused(outcome, f"{target}: is a file, not a directory")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert_refused(run_main(build.main, _synthetic(fifo), capfd), f"{fifo}: is a file")
    below = target / "store"  # a file where a parent directory should be
    assert_refused(run_main(build.main, _synthetic(below), capfd), f"{below}/build.json: cannot")
    assert target.read_bytes() == content


def _writable(directory: Path) -> bool:
    probe = directory / f".probe-{uuid.uuid4().hex}"
    try:
        probe.write_bytes(b"")
    except OSError:
        return False
    probe.unlink()
    return True


@contextlib.contextmanager
def _read_only_directory(path: Path) -> Iterator[Path]:
    """``path`` as a directory nobody can write to: mode 0o555, and where that does not
    stop the writer (root), the immutable attribute (``chattr +i``) instead."""
    path.mkdir()
    path.chmod(0o555)
    immutable = False
    try:
        if _writable(path):
            chattr = shutil.which("chattr")
            if chattr and subprocess.run([chattr, "+i", str(path)]).returncode == 0:
                immutable = True
            if not immutable or _writable(path):
                pytest.skip("running as root: a 0o555 directory stays writable, no chattr +i")
        yield path
    finally:
        if immutable:
            subprocess.run([str(shutil.which("chattr")), "-i", str(path)], check=True)
        path.chmod(0o755)


def test_out_in_a_read_only_directory_is_one_error_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with _read_only_directory(tmp_path / "locked") as locked:
        for out in (locked / "store", locked / "a" / "b", locked):
            outcome = run_main(build.main, _synthetic(out), capfd)
            assert_refused(outcome, f"{out}/build.json: cannot write it")
        json_path, images = flickr_set(tmp_path / "k")
        outcome = run_main(build.main, karpathy_args(json_path, images, locked / "s"), capfd)
        assert_refused(outcome, f"{locked / 's'}/build.json: cannot write it")
        assert list(locked.iterdir()) == []


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("uri", UNREACHABLE)
def test_an_unreachable_uri_is_one_error_line(tmp_path: Path, uri: str) -> None:
    """Run as the user would, in a fresh process: pyarrow's native code writes to the
    process's stderr too, and only one line may reach it."""
    json_path, images = flickr_set(tmp_path)
    runs = [
        ("storage.inspect", [uri]),
        ("storage.build", ["synthetic", "--out", uri]),
        ("storage.build", karpathy_args(json_path, images, uri)),
    ]
    with ThreadPoolExecutor(len(runs)) as pool:  # each waits seconds for the network
        outcomes = list(pool.map(lambda run: run_module(*run, env=_NO_AWS_LOOKUPS), runs))
    for outcome in outcomes:
        line = assert_refused(outcome, only_line=True)
        assert uri.split("?")[0] in line


@pytest.mark.parametrize("uri", BAD_URIS)
def test_an_unusable_uri_is_one_error_line(uri: str) -> None:
    for module, argv in (("storage.inspect", [uri]), ("storage.build", _synthetic(uri))):
        outcome = run_module(module, argv)
        assert_refused(outcome, f"{uri}: cannot open this location", only_line=True)


def test_a_karpathy_build_checks_out_and_splits_before_it_imports_torch(tmp_path: Path) -> None:
    """A malformed ``--out`` and a JSON without a test split are refused before torch is
    imported and ResNet-152 built (seconds, and its weights read): in a process where
    torch cannot be imported at all, the refusals are the same, and nothing is written."""
    json_path, images = flickr_set(tmp_path / "all")
    two_splits, two_images = flickr_set(tmp_path / "two", splits=("train", "val"))
    out = tmp_path / "out"
    script = f"""
import sys
sys.modules["torch"] = None  # any import of torch fails
from storage import StoreError, build_karpathy
for args in [({str(json_path)!r}, {str(images)!r}, "foo://x"),
             ({str(two_splits)!r}, {str(two_images)!r}, {str(out)!r})]:
    try:
        build_karpathy(*args)
    except StoreError as err:
        print("refused:", err)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done.stdout
    assert lines[0].startswith("refused: foo://x: cannot open this location"), lines[0]
    assert lines[1].startswith("refused: ") and "no image in split 'test'" in lines[1], lines[1]
    assert not out.exists()


@pytest.mark.parametrize("blank", ["", "   "])
def test_a_blank_location_is_refused(capfd: pytest.CaptureFixture[str], blank: str) -> None:
    # Not the working directory, which os.path.abspath("") would have made it.
    expected = f"store location {blank!r}: expected a directory path or a URI"
    assert_refused(run_main(inspect_cli.main, [blank], capfd), expected)
    assert_refused(run_main(build.main, _synthetic(blank), capfd), expected)
