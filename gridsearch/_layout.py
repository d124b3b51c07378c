"""Every path of a runs directory (``--runs-dir``), spelled once.

    RUNS_DIR/
      mlflow.db                    the default MLflow tracking store (sqlite)
      mlartifacts/NAME/            its artifacts, one folder per experiment
      tune/NAME/                   the default Tune experiment (``--storage-path``)
      tune/NAME.optuna.db          the Optuna study, beside the Tune experiment
      optuna/NAME.optuna.db        ... or here when the Tune experiment is on a URI
      searches/NAME.json           the search's settings, for ``--resume``
      locks/NAME.lock              who runs the search now (one driver per experiment)
      world/, world-smoke/         the embedded world, built once and reused
      reports/NAME/                ``analysis.report``'s default output

A runs directory may be copied or moved: what a search recorded under its old place
names the same files under the new one through ``rebase``. The runs directory is always
taken by its real path (symbolic links resolved), so a link to it is the same directory.

Dependency-free, so ``analysis`` reads a search's layout without importing Ray.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlparse

__all__ = ["RunsLayout", "local_path", "rebase", "sqlite_file"]


def rebase(text: str, old: Path, new: Path) -> str:
    """``text`` with every path under the directory ``old`` (alone, or inside a URI such
    as ``sqlite:////OLD/mlflow.db`` or ``file:///OLD/tune``) naming the same place under
    ``new`` (also within JSON or text); anything else in it (``/OLDER``, ``/x/OLD``) as it
    is."""
    if str(old) == os.sep:  # everything is under the root: nothing to tell apart
        return text
    pairs = [(str(old), str(new))]
    if quote(str(old)) != str(old):  # a file:// URI's path, percent-encoded
        pairs.append((quote(str(old)), quote(str(new))))
    for before, after in pairs:
        pattern = r"(?<![\w.~%-])" + re.escape(before) + r"(?![\w.~%-])"
        text = re.sub(pattern, after.replace("\\", r"\\"), text)  # literally
    return text


def sqlite_file(uri: str) -> Path | None:
    """The file of a ``sqlite:///FILE`` URI (absolute with a fourth slash); None for others."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def local_path(location: str) -> Path | None:
    """The local path of a path or ``file://``/``sqlite:///`` URI; None for others."""
    if location.startswith("sqlite:///"):
        return sqlite_file(location)
    if location.startswith("file://"):
        return Path(unquote(urlparse(location).path))
    return None if "://" in location else Path(location)


def _real(path: str | os.PathLike[str]) -> Path:
    """``path`` absolute, its symbolic links resolved as far as they go: a loop of them is
    left as it is (``Path.resolve`` raises on one), for the runs directory's checks to
    name (``gridsearch._runs_checks``) before anything is written."""
    return Path(os.path.realpath(path))


@dataclass(frozen=True)
class RunsLayout:
    root: Path  # absolute

    @classmethod
    def at(cls, runs_dir: str | os.PathLike[str]) -> RunsLayout:
        return cls(_real(runs_dir))

    @property
    def mlflow_db(self) -> Path:
        return self.root / "mlflow.db"

    @property
    def tracking_uri(self) -> str:
        """The default ``--tracking-uri``: an absolute sqlite URI (trials run elsewhere)."""
        return f"sqlite:///{self.mlflow_db}"

    @property
    def mlartifacts(self) -> Path:
        return self.root / "mlartifacts"

    @property
    def tune(self) -> Path:
        """The default ``--storage-path``."""
        return self.root / "tune"

    def optuna_db(self, experiment: str, storage_path: str) -> Path:
        """The study's sqlite file: beside the Tune experiment when that is a local path,
        else under ``optuna/`` (sqlite cannot live on s3:// or gs://)."""
        folder = self.root / "optuna" if "://" in storage_path else Path(storage_path)
        return _real(folder) / f"{experiment}.optuna.db"

    def record(self, experiment: str) -> Path:
        """The search's settings (``asdict(SearchSettings)``), read by ``--resume``."""
        return self.root / "searches" / f"{experiment}.json"

    def lock(self, experiment: str) -> Path:
        """Held by the one driver running the experiment (``gridsearch._lock``)."""
        return self.root / "locks" / f"{experiment}.lock"

    @property
    def setup_lock(self) -> Path:
        """Held while a driver sets up the tracking store (sqlite's first use)."""
        return self.root / "locks" / "tracking-setup.flock"

    def world(self, smoke: bool = False) -> Path:
        """The embedded world's store (the smoke test's is a smaller one)."""
        return self.root / ("world-smoke" if smoke else "world")

    def report(self, experiment: str) -> Path:
        return self.root / "reports" / experiment
