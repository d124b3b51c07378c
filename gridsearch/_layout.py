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

Dependency-free, so ``analysis`` reads a search's layout without importing Ray.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RunsLayout"]


@dataclass(frozen=True)
class RunsLayout:
    root: Path  # absolute

    @classmethod
    def at(cls, runs_dir: str | os.PathLike[str]) -> RunsLayout:
        return cls(Path(runs_dir).resolve())

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
        return folder.resolve() / f"{experiment}.optuna.db"

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
