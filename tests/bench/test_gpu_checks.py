"""The GPU checks, ready before a GPU: what ``bench/gpu_prepare.py`` carries and how it
verifies the carried folder, and ``bench/gpu_checks.sh --cpu``, the dry run of both parts
(every step, the deadline that cuts them) on this CPU."""

from __future__ import annotations

import os
import subprocess
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from bench import gpu_prepare
from tests.bench.conftest import BENCH

PINS = gpu_prepare.pins()
IMAGE = gpu_prepare.image_packages()


def test_the_pins_are_the_tested_versions_and_the_image_lacks_the_search() -> None:
    assert {PINS[name] for name in ("ray", "optuna", "mlflow")} == {"2.60.0", "5.0.0", "3.17.2"}
    assert {"torch", "numpy", "pyarrow", "pytest", "pytest-xdist"} <= IMAGE
    assert not {"ray", "optuna", "mlflow", "sqlalchemy", "alembic"} & IMAGE


def test_only_the_wheels_of_packages_the_image_lacks_are_carried() -> None:
    wheels = [
        "numpy-2.4.6-cp312-cp312-manylinux_2_27_x86_64.whl",
        "ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl",
        "SQLAlchemy-2.1.9-cp312-cp312-manylinux2014_x86_64.whl",
        "typing_extensions-4.16.0-py3-none-any.whl",
        "mlflow_skinny-3.17.2-py3-none-any.whl",
    ]
    assert gpu_prepare.carried(wheels, IMAGE) == [wheels[4], wheels[1], wheels[2]]
    assert gpu_prepare.wheel_name("Flask_Cors-6.0.5-py3-none-any.whl") == "flask-cors"


def _carried_folder(root: Path, dists: dict[str, str], extra: tuple[str, ...] = ()) -> Path:
    """A carried folder as the build leaves it: the archive of a site folder holding
    ``dists`` (a package and its dist-info each) and ``extra`` paths, the authors' code."""
    site = root / "build" / "anything"
    for name, version in dists.items():
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(f"__version__ = {version!r}\n")
        (site / f"{name}-{version}.dist-info").mkdir()
        (site / f"{name}-{version}.dist-info" / "METADATA").write_text(f"Name: {name}\n")
    for path in extra:
        (site / path).mkdir(parents=True)
    out = root / ".gpu"
    out.mkdir()
    gpu_prepare.pack(site, out / gpu_prepare.ARCHIVE)
    functions = out / "caption2image" / "PyTorch" / "functions"
    functions.mkdir(parents=True)
    for name in gpu_prepare.AUTHORS_FILES:
        (functions / name).write_text("# theirs\n")
    return out


def test_a_whole_carried_folder_verifies(tmp_path: Path) -> None:
    out = _carried_folder(tmp_path, {n: PINS[n] for n in ("ray", "optuna", "mlflow")})
    assert not list(out.glob("*.tmp"))  # packed through a partial file, renamed at the end
    with tarfile.open(out / gpu_prepare.ARCHIVE) as tar:
        assert {n.split("/")[0] for n in tar.getnames()} == {"site312"}
    assert gpu_prepare.verify(out, PINS, IMAGE, tree=0) == []


def test_every_fault_of_a_carried_folder_is_named(tmp_path: Path) -> None:
    out = _carried_folder(
        tmp_path,
        {"ray": "2.59.0", "optuna": PINS["optuna"], "numpy": "2.4.6"},  # no mlflow
        extra=("ray/jars",),
    )
    (out / "caption2image" / "PyTorch" / "functions" / "trainer.py").unlink()
    problems = "\n".join(gpu_prepare.verify(out, PINS, IMAGE, tree=gpu_prepare.CARRY_LIMIT))
    for expected in [
        "ray 2.59.0, constraints.txt pins 2.60.0",
        "mlflow missing, constraints.txt pins 3.17.2",
        "no site312/mlflow/__init__.py",
        "carries packages the image holds: numpy",
        "holds what is trimmed: ray/jars",
        "missing trainer.py",
        "over the 64 MiB a device call carries",
    ]:
        assert expected in problems
    (out / gpu_prepare.ARCHIVE).write_bytes(b"\xfd7zXZ\x00 cut short")
    [cut] = gpu_prepare.verify(out, PINS, IMAGE, tree=0)
    assert "not a whole xz tar archive" in cut
    (out / gpu_prepare.ARCHIVE).unlink()
    [missing] = gpu_prepare.verify(out, PINS, IMAGE, tree=0)
    assert "missing (run python bench/gpu_prepare.py" in missing


def test_the_command_verifies_or_names_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gpu_prepare.main(["--out", str(tmp_path / "nothing"), "--verify"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path}/nothing/site312.tar.xz: missing")
    assert gpu_prepare.main(["--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: --authors-repo: missing")
    out = _carried_folder(tmp_path, {n: PINS[n] for n in ("ray", "optuna", "mlflow")})
    assert gpu_prepare.main(["--out", str(out), "--verify"]) == 0
    assert "verified (" in capsys.readouterr().out
    assert gpu_prepare.tree_bytes() < 16 * 2**20  # the working tree leaves room for .gpu/


def _checks(
    out: Path,
    store: str,
    *parts: str,
    deadline: float | None = None,
    joined: Sequence[str] = (),
) -> int:
    """The dry run of ``parts`` into ``out``, its benchmarks reading ``store`` (the
    session's world: no interpreter start to build or find one under /tmp)."""
    env = dict(os.environ)
    env.pop("GPU_CHECKS_DEADLINE", None)
    if deadline is not None:
        env["GPU_CHECKS_DEADLINE"] = str(int(deadline))
    flags = ["--cpu", *joined, "--store", store]
    script = ["bash", str(BENCH / "gpu_checks.sh"), *flags, str(out), *parts]
    done = subprocess.run(script, env=env, capture_output=True, text=True, timeout=600)
    return done.returncode


@pytest.mark.slow
def test_the_dry_run_runs_both_parts_on_the_cpu(
    tmp_path: Path, on_cluster: list[str], small_store: str
) -> None:
    """Both parts, the searches joining the session's cluster (--address)."""
    checks = _checks(tmp_path, small_store, "part1", "part2", joined=on_cluster)
    assert checks == 0, (tmp_path / "checks.log").read_text()
    log = (tmp_path / "checks.log").read_text()
    figures = (tmp_path / "figures.txt").read_text()
    for step in ("gpu-tests", "fused", "eval", "optim", "search-interrupted", "search-resumed",
                 "registered-on-cpu"):  # fmt: skip
        assert f"== {step} (limit " in log
    assert "gpu_checks done" in log and ", 0 failed step(s)" in log
    assert "the authors' loop" in figures and "ratio vs lone" in figures
    assert "evaluation averaged over 4 epochs" in figures
    assert "(ours / torch's)" in figures and "weights: bit for bit" in figures
    assert "== search-interrupted: SIGINT after" in log
    assert "the search stopped (SIGINT) with" in log and "== search-interrupted: exit 130" in log
    assert "registered model on cpu (2, " in figures
    with tarfile.open(tmp_path / "runs.tar.gz") as tar:
        names = tar.getnames()
    assert "tune/gpu-sweep.optuna.db" in names and not any(n.endswith(".pt") for n in names)
    assert (tmp_path / "mlflow.db").stat().st_size > 0


@pytest.mark.slow
def test_a_part_stops_at_its_deadline(tmp_path: Path, small_store: str) -> None:
    """One run (one start of the script and its environment step): part1 past its deadline,
    then a part it does not know, each a failed step; and --store refused without --cpu."""
    # four steps skipped, one unknown
    assert _checks(tmp_path, small_store, "part1", "nonsense", deadline=time.time() + 10) == 5
    log = (tmp_path / "checks.log").read_text()
    assert log.count("s left before the deadline") == 4
    assert "python bench/bench_fused.py" not in log  # nothing was started
    assert "unknown part or step nonsense" in log and ", 5 failed step(s)" in log
    # --store is the dry run's alone: the GPU run's benchmarks build their own worlds
    script = ["bash", str(BENCH / "gpu_checks.sh"), "--store", small_store, str(tmp_path)]
    refused = subprocess.run(script, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "--store: only with --cpu" in refused.stderr
