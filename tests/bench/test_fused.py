"""bench_fused.py on a tiny store and model: the lone trial and the fused groups are
measured and compared in one run, a table per batch size; bad flags are one error line.
(The authors' loop runs only where ``--authors-repo`` points at a copy of their code.)"""

from __future__ import annotations

import pytest

from bench import bench_fused


def test_the_fused_groups_are_measured_against_one_lone_trial(
    small_store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--device", "cpu", "--store", small_store, "--images", "96", "--k", "1", "3",
            "--hidden-size", "8", "--batch-size", "8", "12", "--steps", "2",
            "--warmup", "1"]  # fmt: skip
    assert bench_fused.main(argv) == 0
    out = capsys.readouterr().out
    tables = [line for line in out.splitlines() if line.startswith("batch ")]
    assert [t.split(":")[0] for t in tables] == ["batch 8", "batch 12"]
    assert all("the authors' loop nan captions/s; one lone trial (Trainer)" in t for t in tables)
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["1"], ["3"])]
    assert [row[0] for row in rows] == ["1", "3", "1", "3"]
    for row in rows:
        aggregate, per_member, ratio, authors = (float(x.replace(",", "")) for x in row[1:5])
        assert aggregate > 0 and ratio > 0 and authors != authors  # NaN without their code
        assert per_member == pytest.approx(aggregate / int(row[0]), rel=1e-3)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--k", "0"], "error: --k and --steps: expected at least 1"),
        (["--steps", "1000"], "error: --warmup + --steps: 1003 steps, but an epoch of 96"),
        (["--batch-size", "1"], "error: --k and --steps: expected at least 1, --batch-size"),
        (["--authors-repo", ".", "--rnn-type", "lstm"], "error: --authors-repo: their character"),
    ],
)
def test_bad_flags_are_one_error_line(
    small_store: str, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    argv = ["--device", "cpu", "--store", small_store, "--images", "96", "--batch-size", "8",
            "--hidden-size", "8", *flags]  # fmt: skip
    assert bench_fused.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and len(err.strip().splitlines()) == 1
