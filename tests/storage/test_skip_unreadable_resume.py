"""Following the build's own advice works: after an unreadable image stops a build, the
same command with ``--skip-unreadable`` resumes it and completes.

Why that is sound: a shard written without ``--skip-unreadable`` is only written when
every one of its images was read, so it is exactly the shard a run with the flag would
write; shard ``k`` always covers the same images of the JSON either way. The other
direction is not free: a shard written with the flag left images out, so a run without
it refuses to keep that shard (or a finished store that left images out), naming it.
Changes that would mix incompatible shards (extractor, dtype, shard size, codec, JSON)
are still refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from storage import StoreError, StoreWriter, build, open_store
from storage import inspect as inspect_cli
from storage._schema import BUILD_STATE, MANIFEST
from tests.storage.cli_runs import (
    assert_refused,
    flickr_set,
    image_name,
    karpathy_args,
    run_main,
)

SPLITS = ("train", "train", "val", "test")  # entry 1 is made unreadable
BAD = 1


def _unreadable(images: Path, how: str) -> Path:
    path = images / image_name(BAD)
    if how == "missing":
        path.unlink()
    elif how == "corrupt":
        path.write_bytes(b"\xff\xd8\xff not really a JPEG")
    elif how == "directory":
        path.unlink()
        path.mkdir()
    return path


def _shard_identity(out: Path) -> dict[str, tuple[int, int]]:
    """(inode, mtime) of every shard: a rewritten shard gets a new inode."""
    return {
        str(p.relative_to(out)): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in sorted(out.glob("*/*.parquet"))
    }


def _first_run(tmp_path: Path, capfd: pytest.CaptureFixture[str], how: str):
    json_path, images = flickr_set(tmp_path, SPLITS)
    bad = _unreadable(images, how)
    out = tmp_path / "store"
    argv = karpathy_args(json_path, images, out, "--shard-size", "1")
    line = assert_refused(run_main(build.main, argv, capfd), f"{bad}: image listed in the JSON")
    assert "pass --skip-unreadable to leave it out" in line
    assert not (out / MANIFEST).exists() and (out / BUILD_STATE).exists()
    return argv, out


def _kill_before_manifest(out: Path) -> None:
    """Leave ``out`` as a build killed just before its manifest leaves it."""
    manifest = json.loads((out / MANIFEST).read_text())
    (out / BUILD_STATE).write_text(json.dumps(manifest["build"], indent=2) + "\n")
    (out / MANIFEST).unlink()


@pytest.mark.parametrize("how", ["missing", "corrupt", "directory"])
@pytest.mark.slow
def test_rerun_with_skip_unreadable_as_advised_completes(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], how: str
) -> None:
    argv, out = _first_run(tmp_path, capfd, how)
    before = _shard_identity(out)
    assert set(before) == {"images/train-00000.parquet", "captions/train-00000.parquet"}

    advised = run_main(build.main, [*argv, "--skip-unreadable"], capfd)
    assert advised.status == 0, advised.err
    after = _shard_identity(out)
    assert {name: after[name] for name in before} == before  # finished shards kept as is
    manifest = open_store(out).manifest
    assert manifest.splits["train"].skipped_images == (image_name(BAD),)
    assert manifest.splits["train"].images == 1
    assert manifest.build["skip_unreadable"] is True
    assert not (out / BUILD_STATE).exists()
    assert run_main(inspect_cli.main, [str(out)], capfd).status == 0

    again = run_main(build.main, [*argv, "--skip-unreadable"], capfd)
    assert again.status == 0 and _shard_identity(out) == after  # complete: nothing to do
    without = run_main(build.main, argv, capfd)  # the store left an image out
    assert_refused(without, f"{out}: already complete, built with --skip-unreadable", "1 unread")

    if how == "corrupt":  # each run below constructs a ResNet-152: one kind is enough
        # Killed just before its manifest, then run without the flag: the shard that left
        # the image out is refused, not kept. This store serves; it needs no build of its own.
        _kill_before_manifest(out)
        shard = out / "images" / f"train-{BAD:05d}.parquet"
        line = assert_refused(
            run_main(build.main, argv, capfd),
            f"{shard}: an earlier run of this build wrote it with",
        )
        assert f"leaving out 1 unreadable images (the first is {image_name(BAD)!r})" in line
        assert shard.exists() and not (out / MANIFEST).exists()
        assert run_main(build.main, [*argv, "--skip-unreadable"], capfd).status == 0
        assert open_store(out).manifest.splits["train"].skipped_images == (image_name(BAD),)


INCOMPATIBLE = [
    (["--shard-size", "2"], "shard_size"),
    (["--dtype", "float16"], "dtype"),
    (["--feature-compression", "zstd"], "feature_compression"),
    (["--dataset", "flickr30k"], "dataset"),
]


@pytest.mark.slow
def test_incompatible_changes_on_resume_are_still_refused(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    argv, out = _first_run(tmp_path, capfd, "corrupt")
    before = _shard_identity(out), (out / BUILD_STATE).read_bytes()
    for change, differs_in in INCOMPATIBLE:
        for extra in ([], ["--skip-unreadable"]):
            outcome = run_main(build.main, [*argv, *change, *extra], capfd)
            line = assert_refused(outcome, f"{out}: already holds a different store")
            assert f"differs in {differs_in})" in line
            assert (_shard_identity(out), (out / BUILD_STATE).read_bytes()) == before
    json_path = Path(argv[argv.index("--json") + 1])  # a changed JSON: other shards
    data = json.loads(json_path.read_text())
    data["images"][0]["sentences"][0]["raw"] = "A different first caption."
    json_path.write_text(json.dumps(data))
    outcome = run_main(build.main, [*argv, "--skip-unreadable"], capfd)
    assert "differs in json_sha256)" in assert_refused(outcome, "already holds a different store")
    assert (_shard_identity(out), (out / BUILD_STATE).read_bytes()) == before


def test_writer_lets_only_resumable_keys_change(tmp_path: Path) -> None:
    out = tmp_path / "s"
    base = {"source": "t", "skip_unreadable": False, "shard_size": 4}
    first = StoreWriter(out, fingerprint=base, feature_dim=2, resumable=("skip_unreadable",))
    ids, captions = ["a.jpg"], [["c"] * 5]
    record = first.write_shard("train", 0, ids, np.ones((1, 2), np.float32), captions)
    changed = {**base, "skip_unreadable": True}
    again = StoreWriter(out, fingerprint=changed, feature_dim=2, resumable=("skip_unreadable",))
    assert again.existing_shard("train", 0) == record
    assert json.loads((out / BUILD_STATE).read_text()) == changed  # what the run now uses
    with pytest.raises(StoreError, match=r"differs in skip_unreadable\)"):
        StoreWriter(out, fingerprint=base, feature_dim=2)  # not resumable for this writer
    with pytest.raises(StoreError, match=r"differs in shard_size\)"):
        StoreWriter(
            out,
            fingerprint={**changed, "shard_size": 8},
            feature_dim=2,
            resumable=("skip_unreadable",),
        )
