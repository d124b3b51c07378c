"""A real `python -m storage.build` killed mid-way (SIGKILL) and run again: the store ends
complete and valid, and equal to a build that was never interrupted.

The kill is sent once the build has written some shards; the test then waits for the
process to die and checks that it really died before the manifest (else it starts over
in a fresh directory), so the verdict never depends on timing. Kills that land inside a
write are covered by also leaving the files such a kill leaves behind (temporary files
of each atomic writer, a caption shard without its image shard, a missing image).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from storage import StoreError, build, open_store
from storage import inspect as inspect_cli
from storage._schema import BUILD_STATE, MANIFEST, SPLITS
from tests.storage.cli_runs import run_main

REPO = Path(__file__).resolve().parents[2]
# 600 scenes in shards of 4: 150 shard pairs, written over ~2 s after ~1 s of world
# generation, so the kill has a wide window between the first shard and the manifest.
BUILD_ARGS = ["synthetic", "--images", "600", "--seed", "5", "--shard-size", "4"]
TOTAL_SHARDS = 150
TIMEOUT_S = 120  # per build: far above the ~4 s one takes on two cores
HEX = "0123456789abcdef" * 2  # a 32-hex-digit stand-in for the writers' uuid4().hex


def _command(out: Path) -> list[str]:
    return [sys.executable, "-m", "storage.build", *BUILD_ARGS, "--out", str(out)]


def _image_shards(out: Path) -> list[Path]:
    return sorted((out / "images").glob("[!.]*.parquet"))


def _kill_mid_way(out: Path, log: Path, min_shards: int = 2) -> None:
    """Start the build into ``out`` and SIGKILL it (and its process group) once it has
    written ``min_shards`` image shards. Raises ``AssertionError`` if it dies otherwise."""
    with log.open("w") as stderr:
        process = subprocess.Popen(
            _command(out), cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr,
            start_new_session=True,  # its own group, so the kill reaches any worker too
        )  # fmt: skip
        try:
            deadline = time.monotonic() + TIMEOUT_S
            while process.poll() is None and time.monotonic() < deadline:
                if len(_image_shards(out)) >= min_shards:
                    break
                time.sleep(0.005)
            assert process.poll() is None, (
                f"the build ended (exit {process.returncode}) before it could be killed:\n"
                + log.read_text()
            )
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _killed_build(tmp_path: Path) -> Path:
    """A store directory whose build was killed after some shards and before the manifest;
    a kill that came too late (manifest written) is retried in a fresh directory."""
    for attempt in range(3):
        out = tmp_path / f"killed-{attempt}"
        _kill_mid_way(out, tmp_path / f"killed-{attempt}.log")
        # The process is dead, so what it left can no longer change.
        if not (out / MANIFEST).exists():
            return out
    pytest.fail("three builds in a row wrote their manifest before the kill landed")


def _leave_what_a_kill_inside_a_write_leaves(out: Path) -> list[Path]:
    """The debris of kills at other moments than the one the test caught: a temporary
    file of each atomic writer, a caption shard whose image shard was never renamed into
    place, and an image not yet drawn. Returns the temporary files."""
    last_caption = sorted((out / "captions").glob("[!.]*.parquet"))[-1]
    (out / "images" / last_caption.name).unlink(missing_ok=True)
    (out / "world" / "images" / "000599.png").unlink()
    senteval_dir = out / "world" / "senteval" / "STS" / "STS12-en-test"
    temporary = [
        out / "images" / f".train-00119.parquet.{HEX}.tmp",
        out / "captions" / f".train-00119.parquet.{HEX}.tmp",
        out / f".{MANIFEST}.{HEX}.tmp",
        out / "world" / f".dataset_synthetic.json.{HEX}.tmp",
        senteval_dir / f".STS.input.captions.txt.{HEX}.tmp",
        out / "world" / "images" / "000599.png.4242.tmp",
    ]
    for path in temporary:
        path.write_bytes(b"PAR1 half a file")
    return temporary


@pytest.mark.slow
def test_build_killed_mid_way_then_run_again_is_complete_and_valid(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    straight = tmp_path / "straight"
    assert build.main([*BUILD_ARGS, "--out", str(straight)]) == 0

    out = _killed_build(tmp_path)
    assert (out / BUILD_STATE).exists()
    assert 2 <= len(_image_shards(out)) < TOTAL_SHARDS
    with pytest.raises(StoreError, match="did not finish"):
        open_store(out)
    temporary = _leave_what_a_kill_inside_a_write_leaves(out)

    # The rerun and the inspection run in this process (only the kill needs a process of
    # its own); the killed build's stderr shows that its log reaches a user's terminal.
    assert "generated a world of 600 images" in out.with_suffix(".log").read_text()
    caplog.set_level(logging.INFO, logger="storage")
    rerun = run_main(build.main, [*BUILD_ARGS, "--out", str(out)], capfd)
    assert rerun.status == 0, rerun.err
    assert "resuming the unfinished build" in caplog.text
    inspect = run_main(inspect_cli.main, [str(out)], capfd)
    assert inspect.status == 0, inspect.err
    assert f"verified   {2 * TOTAL_SHARDS} shards" in inspect.out

    # Nothing left over: no temporary file anywhere, no build state, every image back.
    assert [p for p in out.rglob("*") if p.name.endswith(".tmp")] == []
    assert not any(p.exists() for p in temporary)
    assert not (out / BUILD_STATE).exists()
    assert (out / "world" / "images" / "000599.png").is_file()

    # Every image of the JSON exactly once, with the features, captions and order of the
    # uninterrupted build (the scene-projection extractor is deterministic).
    resumed, reference = open_store(out), open_store(straight)
    ids = Counter(i for split in SPLITS for i in resumed.read_split(split).image_ids)
    dataset = json.loads((out / "world" / "dataset_synthetic.json").read_text())
    assert ids == Counter(entry["filename"] for entry in dataset["images"])
    assert set(ids.values()) == {1}
    for split in SPLITS:
        got, want = resumed.read_split(split), reference.read_split(split)
        assert got.image_ids.tolist() == want.image_ids.tolist()
        np.testing.assert_array_equal(got.features, want.features)
        np.testing.assert_array_equal(got.captions, want.captions)
    assert (out / MANIFEST).read_text() == (straight / MANIFEST).read_text()
