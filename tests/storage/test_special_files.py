"""Only regular files are read: a FIFO, socket, directory or device named like an image or
a data file is refused by name (or, for an image under ``--skip-unreadable``, left out and
listed), and never opened, so nothing blocks.

A FIFO named ``x.jpg`` used to hang ``storage.build`` forever (``open()`` waits for a
writer); the timeouts turn such a hang into a failure instead of a stuck test run.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from storage import StoreError, build, open_store
from storage import inspect as inspect_cli
from storage.features import load_image_rgb
from storage.senteval import load_senteval
from tests.storage.cli_runs import (
    assert_refused,
    flickr_set,
    image_name,
    karpathy_args,
    run_main,
)
from tests.storage.test_senteval import write_official_tree

TIMEOUT = 120  # seconds; a build of these few images takes a few


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _directory(path: Path) -> None:
    path.mkdir()
    (path / "inside.jpg").write_bytes(b"not looked at")


def _device(path: Path) -> None:
    path.symlink_to("/dev/zero")  # a character device, reached through a symbolic link


SPECIAL: dict[str, tuple[Callable[[Path], None], str]] = {
    "fifo": (_fifo, "it is a FIFO"),
    "directory": (_directory, "it is a directory"),
    "device": (_device, "it is a character device"),
}


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Callable[[Path], None]]:
    """Binds a listening Unix socket at a path (closed after the test)."""
    sockets: list[socket.socket] = []

    def bind(path: Path) -> None:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        server.listen(1)
        sockets.append(server)

    yield bind
    for server in sockets:
        server.close()


def _replace(images: Path, k: int, make: Callable[[Path], None]) -> Path:
    """Put ``make``'s special file where entry ``k``'s image was."""
    path = images / image_name(k)
    path.unlink()
    make(path)
    return path


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("kind", list(SPECIAL))
@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_special_file_named_like_an_image_stops_the_build_naming_it(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], kind: str, workers: str
) -> None:
    json_path, images = flickr_set(tmp_path, ("train", "val", "test"))
    make, says = SPECIAL[kind]
    special = _replace(images, 0, make)  # the first image: no forward pass before it
    out = tmp_path / "store"
    argv = [*karpathy_args(json_path, images, out), "--workers", workers]
    line = assert_refused(run_main(build.main, argv, capfd), f"{special}: image listed in the")
    assert f"is not a regular file: {says}" in line and "--skip-unreadable" in line
    assert not (out / "manifest.json").exists()


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.slow
def test_a_socket_named_like_an_image_stops_the_build_naming_it(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], unix_socket: Callable[[Path], None]
) -> None:
    json_path, images = flickr_set(tmp_path / "s", ("train", "val", "test"))
    special = _replace(images, 0, unix_socket)  # the first image: no forward pass before it
    outcome = run_main(build.main, karpathy_args(json_path, images, tmp_path / "o"), capfd)
    assert_refused(outcome, f"{special}: image listed in the JSON is not a regular file: it is a")


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.slow
def test_skip_unreadable_leaves_special_files_out_and_lists_them(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], unix_socket: Callable[[Path], None]
) -> None:
    splits = ("train", "train", "train", "val", "val", "test", "test")
    json_path, images = flickr_set(tmp_path / "s", splits)
    _replace(images, 1, _fifo)
    _replace(images, 2, _directory)
    _replace(images, 4, unix_socket)
    _replace(images, 6, _device)
    out = tmp_path / "store"
    argv = karpathy_args(json_path, images, out, "--skip-unreadable")
    outcome = run_main(build.main, argv, capfd)
    assert outcome.status == 0, outcome.err
    manifest = open_store(out).manifest
    assert manifest.splits["train"].skipped_images == (image_name(1), image_name(2))
    assert manifest.splits["val"].skipped_images == (image_name(4),)
    assert manifest.splits["test"].skipped_images == (image_name(6),)
    assert [manifest.splits[s].images for s in ("train", "val", "test")] == [1, 1, 1]
    assert run_main(inspect_cli.main, [str(out)], capfd).status == 0


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("kind", list(SPECIAL))
def test_load_image_rgb_refuses_without_opening(tmp_path: Path, kind: str) -> None:
    make, says = SPECIAL[kind]
    path = tmp_path / "x.png"
    make(path)
    with pytest.raises(OSError, match=f"not a regular file: {says}"):
        load_image_rgb(path)


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("kind", list(SPECIAL))
def test_special_files_where_a_json_file_or_weights_are_expected(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], kind: str
) -> None:
    make, says = SPECIAL[kind]
    json_path, images = flickr_set(tmp_path / "s")
    fake = tmp_path / "dataset_flickr8k.json"
    make(fake)
    outcome = run_main(build.main, karpathy_args(fake, images, tmp_path / "o1"), capfd)
    assert_refused(outcome, f"{fake}: cannot read the Karpathy JSON (not a regular file: {says})")
    weights = tmp_path / "resnet152.pth"
    make(weights)
    argv = [*karpathy_args(json_path, images, tmp_path / "o2"), "--weights", str(weights)]
    assert_refused(run_main(build.main, argv, capfd), f"--weights {weights}: not a regular file")
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("small") / "store"
    assert build.main(["synthetic", "--images", "10", "--out", str(out)]) == 0
    return out


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("kind", list(SPECIAL))
@pytest.mark.parametrize("name", ["manifest.json", "images/train-00000.parquet"])
def test_special_files_inside_a_store(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], small_store: Path, kind: str, name: str
) -> None:
    make, says = SPECIAL[kind]
    store = tmp_path / "store"
    shutil.copytree(small_store, store)
    (store / name).unlink()
    make(store / name)
    for argv in ([str(store)], [str(store), "--no-verify"]):
        if name != "manifest.json" and "--no-verify" in argv:
            continue  # the summary reads no shard
        outcome = run_main(inspect_cli.main, argv, capfd)
        assert_refused(outcome, f"{store / name}: cannot read it (not a regular file: {says})")
    if name != "manifest.json":  # reading a split without verifying still reads the shard
        with pytest.raises(StoreError, match=f"not a regular file: {says}"):
            open_store(store).read_split("train")


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("kind", list(SPECIAL))
@pytest.mark.parametrize("relative", ["suite.json", "STS/STS12-en-test/STS.input.MSRpar.txt"])
def test_special_files_in_a_senteval_directory(tmp_path: Path, kind: str, relative: str) -> None:
    make, says = SPECIAL[kind]
    root = write_official_tree(tmp_path / "downstream")
    if relative == "suite.json":  # a real suite first, so only the file's kind is wrong
        suite = {"name": "x", "sts": {"STS12": ["MSRpar"]}, "supervised": []}
        (root / relative).write_text(json.dumps(suite))
    (root / relative).unlink()
    make(root / relative)
    with pytest.raises(StoreError) as err:
        load_senteval(root)
    assert str(root / relative) in str(err.value) and f"not a regular file: {says}" in str(
        err.value
    )
