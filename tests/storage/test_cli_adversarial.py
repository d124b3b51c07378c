"""``storage.build`` and ``storage.inspect`` used the wrong way, as an adversarial user
would: help works, and every mistake (a missing file, a directory where a file goes, an
empty or binary file, a tampered store, a device that is not there) is one ``error:``
line naming what is wrong, with exit status 2 and no traceback.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage import build
from storage import inspect as inspect_cli
from storage._schema import BUILD_STATE, MANIFEST
from tests.storage.cli_runs import (
    assert_refused,
    flickr_set,
    image_name,
    karpathy_args,
    run_main,
)


@pytest.mark.parametrize(
    ("main", "argv"),
    [
        (build.main, ["--help"]),
        (build.main, ["karpathy", "--help"]),
        (build.main, ["synthetic", "--help"]),
        (inspect_cli.main, ["--help"]),
    ],
)
def test_help_works(capfd: pytest.CaptureFixture[str], main: Callable, argv: list[str]) -> None:
    outcome = run_main(main, argv, capfd)
    assert outcome.status == 0 and outcome.out.startswith("usage: ") and outcome.err == ""


@pytest.mark.parametrize(
    ("main", "argv", "says"),
    [
        (build.main, [], "the following arguments are required: source"),
        (build.main, ["bogus"], "argument source: invalid choice: 'bogus'"),
        (build.main, ["karpathy"], "required: --json, --images, --out"),
        (build.main, ["synthetic"], "required: --out"),
        (build.main, ["synthetic", "--out", "o", "--nope"], "unrecognized arguments: --nope"),
        (build.main, ["synthetic", "--out", "o", "--features", "x"], "argument --features"),
        (build.main, ["synthetic", "--out", "o", "--dtype", "float64"], "argument --dtype"),
        (build.main, ["synthetic", "--out"], "argument --out: expected one argument"),
        (inspect_cli.main, [], "the following arguments are required: store"),
        (inspect_cli.main, ["a", "b"], "unrecognized arguments: b"),
        (inspect_cli.main, ["s", "--verify-harder"], "unrecognized arguments"),
    ],
)
def test_a_bad_command_line_is_exactly_one_line(
    capfd: pytest.CaptureFixture[str], main: Callable, argv: list[str], says: str
) -> None:
    line = assert_refused(run_main(main, argv, capfd), says, only_line=True)
    assert line.endswith(" --help)")  # says where the usage is, instead of printing it


def test_missing_and_misplaced_inputs(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    json_path, images = flickr_set(tmp_path / "k")
    absent = tmp_path / "absent"
    cases = [
        (karpathy_args(absent, images, "o"), f"{absent}: cannot read the Karpathy JSON (no such"),
        (karpathy_args(json_path, absent, "o"), f"--images {absent}: not a directory"),
        (karpathy_args(json_path, json_path, "o"), f"--images {json_path}: not a directory"),
        (
            [*karpathy_args(json_path, images, "o"), "--weights", str(absent)],
            f"--weights {absent}: no such file",
        ),
    ]
    for argv, says in cases:
        assert_refused(run_main(build.main, argv, capfd), says)
    assert not Path("o").exists()


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"", "cannot be read as a torchvision ResNet-152"),
        (random.Random(1).randbytes(4096), "cannot be read as a torchvision ResNet-152"),
        (b"PK\x03\x04 not really a zip", "cannot be read as a torchvision ResNet-152"),
    ],
)
def test_weights_that_are_not_weights(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], content: bytes, says: str
) -> None:
    json_path, images = flickr_set(tmp_path / "k")
    weights = tmp_path / "resnet152-394f9c45.pth"
    weights.write_bytes(content)
    argv = [*karpathy_args(json_path, images, tmp_path / "o"), "--weights", str(weights)]
    outcome = run_main(build.main, argv, capfd)
    assert_refused(outcome, f"--weights {weights}", says)
    assert "weights_only" not in outcome.err  # never advice to run the file's pickle


@pytest.mark.parametrize(
    ("device", "says"),
    [
        ("bogus", "--device bogus: expected cpu, cuda or cuda:N"),
        ("cuda:99", "--device cuda:99: this machine has"),
        ("meta", "--device meta: expected cpu, cuda or cuda:N"),
        ("cpu:x", "--device cpu:x: expected cpu, cuda or cuda:N"),
    ],
)
def test_a_device_this_machine_cannot_use(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], device: str, says: str
) -> None:
    json_path, images = flickr_set(tmp_path / "k")
    argv = [*karpathy_args(json_path, images, tmp_path / "o"), "--device", device]
    assert_refused(run_main(build.main, argv, capfd), says)
    assert not (tmp_path / "o").exists()


def test_inspect_on_what_is_not_a_store(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_bytes(b"hello")
    (tmp_path / "unfinished").mkdir()
    (tmp_path / "unfinished" / BUILD_STATE).write_text("{}")
    cases = {
        "absent": "is not a feature store",
        "empty": "is not a feature store",
        "file": "is not a feature store",
        "unfinished": "the build of this store did not finish",
    }
    for name, says in cases.items():
        store = tmp_path / name
        assert_refused(run_main(inspect_cli.main, [str(store)], capfd), f"{store}/{MANIFEST}", says)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file of mode 000 all the same")
def test_an_unreadable_json(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    json_path, images = flickr_set(tmp_path / "k")
    json_path.chmod(0)
    outcome = run_main(build.main, karpathy_args(json_path, images, tmp_path / "o"), capfd)
    assert_refused(outcome, f"{json_path}: cannot read the Karpathy JSON (Permission denied)")


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("small") / "store"
    assert build.main(["synthetic", "--images", "10", "--out", str(out)]) == 0
    return out


def _split(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest["splits"]["train"]


TAMPERING: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "feature_dim 0": (lambda m: m.update(feature_dim=0), "'feature_dim': expected an integer"),
    "feature_dim huge": (lambda m: m.update(feature_dim=10**30), "'feature_dim': expected an"),
    "feature_dim float": (lambda m: m.update(feature_dim=2048.0), "'feature_dim': expected int"),
    "negative images": (lambda m: _split(m).update(images=-1), "'splits.train.images': expected"),
    "rows a string": (
        lambda m: _split(m)["image_shards"][0].update(rows="8"),
        "'splits.train.image_shards[0].rows': expected int, got str",
    ),
    "rows beyond memory": (
        lambda m: (
            _split(m).update(images=2**50, captions=5 * 2**50),
            _split(m)["image_shards"][0].update(rows=2**50),
            _split(m)["caption_shards"][0].update(rows=5 * 2**50),
        ),
        "split 'train' lists 1,125,899,906,842,624 images of 2,048 features",
    ),
    "skipped a string": (
        lambda m: _split(m).update(skipped_images="x.png"),
        "'splits.train.skipped_images': expected a list of image ids",
    ),
    "skipped numbers": (
        lambda m: _split(m).update(skipped_images=[1, 2]),
        "'splits.train.skipped_images': expected a list of image ids",
    ),
    "truncated a string": (
        lambda m: _split(m).update(truncated_images="two"),
        "'splits.train.truncated_images': expected int, got str",
    ),
    "truncated negative": (
        lambda m: _split(m).update(truncated_images=-2),
        "'splits.train.truncated_images': expected an integer from 0",
    ),
    "build a list": (lambda m: m.update(build=[]), "'build': expected a JSON object, got list"),
    "splits a list": (lambda m: m.update(splits=[]), "'splits': expected dict, got list"),
}


@pytest.mark.parametrize("name", list(TAMPERING))
def test_a_tampered_manifest_is_one_error_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], small_store: Path, name: str
) -> None:
    change, says = TAMPERING[name]
    store = tmp_path / "store"
    shutil.copytree(small_store, store)
    manifest = json.loads((store / MANIFEST).read_text())
    change(manifest)
    (store / MANIFEST).write_text(json.dumps(manifest))
    assert_refused(run_main(inspect_cli.main, [str(store)], capfd), f"{store / MANIFEST}", says)


@pytest.fixture(scope="module")
def stopped_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    """A build with shard train-00000 written, stopped by a missing image in shard 1."""
    root = tmp_path_factory.mktemp("stopped")
    json_path, images = flickr_set(root, ("train", "train", "val", "test"))
    (images / image_name(1)).unlink()
    out = root / "store"
    argv = karpathy_args(json_path, images, out, "--shard-size", "1")
    assert build.main(argv) == 2
    assert (out / "images" / "train-00000.parquet").exists()
    return argv, out


def _parquet_with_metadata(path: Path, metadata: dict[bytes, bytes]) -> None:
    table = pa.table({"image_id": pa.array(["x"])}).replace_schema_metadata(metadata)
    pq.write_table(table, path)


@pytest.mark.parametrize(
    ("spoil", "says"),
    [
        (lambda p: p.write_bytes(b"not parquet at all"), "is not a readable Parquet file"),
        (lambda p: p.write_bytes(b""), "is not a readable Parquet file"),
        (
            lambda p: _parquet_with_metadata(p, {b"skipped_images": b"[" * 10_000}),
            "has bad metadata",
        ),
        (
            lambda p: _parquet_with_metadata(p, {b"truncated_images": b"many"}),
            "has bad metadata",
        ),
        (lambda p: _parquet_with_metadata(p, {b"skipped_images": b"{}"}), "has bad metadata"),
    ],
)
def test_resuming_over_a_spoilt_shard_names_it(
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    stopped_build: tuple[list[str], Path],
    spoil: Callable[[Path], None],
    says: str,
) -> None:
    argv, stopped = stopped_build
    out = tmp_path / "store"  # a copy: the build's settings do not include --out
    shutil.copytree(stopped, out)
    argv = [*argv, "--out", str(out)]  # the last --out counts
    shard = out / "images" / "train-00000.parquet"
    spoil(shard)
    spoilt = shard.read_bytes()
    line = assert_refused(run_main(build.main, argv, capfd), f"{shard}: left by an earlier run")
    assert says in line and "delete it to have it written again" in line
    assert shard.read_bytes() == spoilt  # nothing already written is touched
