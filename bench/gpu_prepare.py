"""Everything the GPU checks need that a lent GPU machine lacks, built here into ``.gpu/``.

    python bench/gpu_prepare.py --authors-repo PATH     # build .gpu/, then verify it
    python bench/gpu_prepare.py --verify                # verify an existing .gpu/

The GPU machines (Python 3.12, torch, no Ray, Optuna or MLflow, nothing reachable from
them) get the search's packages as one archive, ``.gpu/site312.tar.xz``: the cp312
manylinux wheels of Ray, Optuna and MLflow at the versions ``constraints.txt`` pins and of
every dependency the machine's image lacks (``bench/gpu_image.txt`` lists what it holds),
installed with ``pip install --target``, trimmed of what no check runs (Ray's Java jars,
RLlib and dashboard front end, MLflow's UI bundle, console scripts), packed with xz.
``.gpu/caption2image/PyTorch/functions`` is a copy of the authors' training code (their
``caption2image``, a work tree or the git directory ``fetch`` brings; nothing of it is
committed) for ``bench/bench_fused.py --authors-repo``. ``.gpu/manifest.json`` says what was
carried. ``.gpu/`` is ignored by git and travels with the working tree when a device call
names it in ``carry``; the whole, working tree included, must stay under the 64 MiB a call
may carry, which ``--verify`` checks along with the archive's names and versions.

On the GPU machine ``bench/gpu_checks.sh`` unpacks the archive itself (part 2).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

if not __package__:  # run as a file: the repository first on sys.path (see bench/__init__.py)
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench._cli import BadInput, entry, parser

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / ".gpu"
ARCHIVE = "site312.tar.xz"
SITE = "site312"  # the archive's one top-level folder
CARRY_LIMIT = 64 * 2**20  # what one device call may carry: working tree and carried paths
REQUIRED = ("ray", "optuna", "mlflow")
AUTHORS_FILES = ("trainer.py", "encoders.py", "costum_loss.py", "grad_tracker.py")
# what no GPU check runs, left out of the archive (paths inside the site folder)
TRIMMED = (
    "ray/jars",  # the Java workers
    "ray/rllib",
    "ray/dashboard/client",  # the dashboard's front end (the checks run --no-dashboard)
    "mlflow/server/js",  # the UI's bundle (the tracking store is read back here)
    "bin",  # console scripts: the checks run `python3 -m ...`
)
PLATFORMS = (
    "manylinux_2_35_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64",
    "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64",
)  # fmt: skip
TARGET = ["--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:"]
TARGET += [arg for platform in PLATFORMS for arg in ("--platform", platform)]


def normalized(name: str) -> str:
    """A distribution's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def image_packages(path: Path = REPO / "bench" / "gpu_image.txt") -> set[str]:
    """The packages the GPU machines' image holds (normalised names)."""
    lines = (line.strip() for line in path.read_text().splitlines())
    return {normalized(line) for line in lines if line and not line.startswith("#")}


def pins(constraints: Path = REPO / "constraints.txt") -> dict[str, str]:
    """``constraints.txt``'s ``name==version`` pins (normalised names)."""
    found = {}
    for line in constraints.read_text().splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and not name.startswith("#"):
            found[normalized(name)] = version
    return found


def wheel_name(wheel: str) -> str:
    """The distribution a wheel file holds (normalised)."""
    return normalized(Path(wheel).name.split("-")[0])


def carried(wheels: Iterable[str], image: set[str]) -> list[str]:
    """The wheels to carry: those of packages the image lacks, in name order."""
    return sorted((w for w in wheels if wheel_name(w) not in image), key=wheel_name)


def _pip(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "-q", *args], capture_output=True,
                          text=True)  # fmt: skip
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise BadInput(f"error: pip {args[0]} failed: {last}")


def download(dest: Path, versions: dict[str, str]) -> list[str]:
    """The cp312 wheels of the search's packages and all they need, at the pinned
    versions (torch and its CUDA libraries left to the image)."""
    wanted = [f"ray[tune,default]=={versions['ray']}", f"optuna=={versions['optuna']}",
              f"mlflow=={versions['mlflow']}"]  # fmt: skip
    skip = re.compile(r"^(torch|torchvision|triton|nvidia|cuda)", re.IGNORECASE)
    constraints = dest / "constraints.txt"
    constraints.write_text("".join(f"{name}=={v}\n" for name, v in versions.items()
                                   if not skip.match(name)))  # fmt: skip
    _pip("download", "-d", str(dest), *TARGET, "-c", str(constraints), *wanted)
    return sorted(p.name for p in dest.glob("*.whl"))


def install(wheels: Sequence[Path], site: Path) -> None:
    """``wheels`` unpacked into ``site`` as the GPU machine's Python would install them,
    then trimmed of :data:`TRIMMED` and byte-code caches."""
    _pip("install", "--target", str(site), "--no-deps", "--no-compile", *TARGET,
         *map(str, wheels))  # fmt: skip
    for part in TRIMMED:
        shutil.rmtree(site / part, ignore_errors=True)
    for cache in list(site.rglob("__pycache__")):
        shutil.rmtree(cache, ignore_errors=True)


def pack(site: Path, archive: Path) -> None:
    """``site`` as ``archive`` (xz), its one top-level folder named :data:`SITE`."""
    partial = archive.with_name(archive.name + ".tmp")
    subprocess.run(["tar", "-cf", str(partial), "-I", "xz -9 -T0", "-C", str(site.parent),
                    "--transform", f"s,^{site.name},{SITE},", site.name],
                   check=True)  # fmt: skip
    partial.replace(archive)  # a cut-short build never leaves a half archive behind


def copy_authors(repo: Path, out: Path) -> None:
    """The authors' ``PyTorch/functions`` (from a work tree or a git directory) into
    ``out/caption2image``."""
    from bench._authors import authors_functions

    dest = out / "caption2image" / "PyTorch" / "functions"
    shutil.rmtree(dest.parents[1], ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="authors-") as scratch:
        shutil.copytree(authors_functions(repo.resolve(), Path(scratch)), dest)


def tree_bytes(repo: Path = REPO) -> int:
    """Bytes of what a device call sends besides carried paths: tracked files and untracked
    ones git does not ignore."""
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True, check=True,
    ).stdout.split(b"\0")  # fmt: skip
    files = (repo / name.decode() for name in listed if name)
    return sum(f.stat().st_size for f in files if f.is_file())


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def verify(out: Path, versions: dict[str, str], image: set[str], tree: int) -> list[str]:
    """What is wrong with ``out`` as the GPU checks' carried folder (empty: nothing):
    the archive's names (Ray, Optuna and MLflow at their pins, no package the image holds,
    nothing trimmed), the authors' code, and the whole under :data:`CARRY_LIMIT`."""
    problems = []
    archive = out / ARCHIVE
    if not archive.is_file():
        return [f"{archive}: missing (run python bench/gpu_prepare.py --authors-repo PATH)"]
    try:
        with tarfile.open(archive, "r:xz") as tar:
            names = tar.getnames()
    except (tarfile.TarError, EOFError, OSError) as e:
        return [f"{archive}: not a whole xz tar archive ({e})"]
    tops = {n.split("/")[0] for n in names}
    if tops != {SITE}:
        problems.append(f"{archive}: expected one top-level folder {SITE}/, found {sorted(tops)}")
    dists = {}
    for n in names:
        parts = n.split("/")
        if len(parts) == 2 and parts[1].endswith(".dist-info"):
            name, _, version = parts[1].removesuffix(".dist-info").rpartition("-")
            dists[normalized(name)] = version
    for name in REQUIRED:
        if dists.get(name) != versions.get(name):
            problems.append(f"{archive}: {name} {dists.get(name, 'missing')}, constraints.txt "
                            f"pins {versions.get(name)}")  # fmt: skip
        if not any(n.startswith(f"{SITE}/{name}/__init__.py") for n in names):
            problems.append(f"{archive}: no {SITE}/{name}/__init__.py")
    if doubled := sorted(set(dists) & image):
        problems.append(f"{archive}: carries packages the image holds: {', '.join(doubled)}")
    if kept := sorted(p for p in TRIMMED if f"{SITE}/{p}" in names):
        problems.append(f"{archive}: holds what is trimmed: {', '.join(kept)}")
    functions = out / "caption2image" / "PyTorch" / "functions"
    if missing := [f for f in AUTHORS_FILES if not (functions / f).is_file()]:
        problems.append(f"{functions}: missing {', '.join(missing)} (--authors-repo PATH)")
    total = tree + folder_bytes(out)
    if total > CARRY_LIMIT:
        problems.append(f"{out}: {total / 2**20:.1f} MiB with the working tree, over the "
                        f"{CARRY_LIMIT / 2**20:.0f} MiB a device call carries")  # fmt: skip
    return problems


class Manifest(NamedTuple):
    """What ``.gpu/manifest.json`` records of a build."""

    python: str
    wheels: list[str]
    trimmed: list[str]
    unpacked_bytes: int
    archive_bytes: int


def build(out: Path, authors: Path) -> Manifest:
    """``out`` built afresh: the archive, the authors' code and the manifest."""
    versions = pins()
    image = image_packages()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu-prepare-") as scratch:
        wheels_dir = Path(scratch) / "wheels"
        wheels_dir.mkdir()
        wheels = carried(download(wheels_dir, versions), image)
        site = Path(scratch) / SITE
        install([wheels_dir / w for w in wheels], site)
        unpacked = folder_bytes(site)
        pack(site, out / ARCHIVE)
    copy_authors(authors, out)
    manifest = Manifest("3.12", wheels, list(TRIMMED), unpacked, (out / ARCHIVE).stat().st_size)
    (out / "manifest.json").write_text(json.dumps(manifest._asdict(), indent=1) + "\n")
    return manifest


@entry
def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--out", type=Path, default=OUT, help="the carried folder")
    p.add_argument("--authors-repo", type=Path, default=None,
                   help="the authors' caption2image: a work tree or a git directory")  # fmt: skip
    p.add_argument("--verify", action="store_true", help="only verify an existing --out")
    args = p.parse_args(argv)
    if not args.verify:
        if args.authors_repo is None:
            raise BadInput("error: --authors-repo: missing; give a copy of the authors' "
                           "caption2image (a work tree or a git directory)")  # fmt: skip
        manifest = build(args.out, args.authors_repo)
        print(f"{args.out / ARCHIVE}: {len(manifest.wheels)} wheels "
              f"({manifest.unpacked_bytes / 2**20:.0f} MiB unpacked), "
              f"{manifest.archive_bytes / 2**20:.1f} MiB packed")  # fmt: skip
    problems = verify(args.out, pins(), image_packages(), tree_bytes())
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        return 2
    total = tree_bytes() + folder_bytes(args.out)
    print(f"{args.out}: verified ({total / 2**20:.1f} MiB with the working tree, of "
          f"{CARRY_LIMIT / 2**20:.0f} MiB)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
