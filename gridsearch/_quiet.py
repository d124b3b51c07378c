"""The libraries' own noise kept out of the search's terminal (``quiet_libraries``):
Tune's slow-step warnings, the grid sampler's ``Study.stop`` error and Tune's advice on
restoring an interrupted experiment, each through the library's own settings or one
logging filter that drops only that record."""

from __future__ import annotations

import logging
import os

__all__ = ["quiet_libraries"]


class _GridSamplerStop(logging.Filter):
    """Optuna's grid sampler calls ``Study.stop`` once the grid is done, which raises
    outside ``Study.optimize`` (Tune tells the study its results from outside); Ray's
    OptunaSearch logs that error as a warning after the trial's result was stored. This
    filter drops that one record, and only it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg
        return not (
            isinstance(message, RuntimeError)
            and str(message).startswith("`Study.stop` is supposed to be invoked")
        )


_OPTUNA_SEARCH_LOGGER = "ray.tune.search.optuna.optuna_search"


class _TuneRestoreAdvice(logging.Filter):
    """Tune's ``tune.run`` ends an interrupted experiment with a warning that tells how
    to restore it through its Python API (``Resume experiment with: Tuner.restore(...)``,
    or ``tune.run(..., resume=True)``, per entry point): not the command that continues
    this search, which the driver prints (``continue it:``, also under ``--quiet``). This
    filter drops those records, and only them."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (
            "has been interrupted, but the most recent state was" in message
            and ("Resume experiment with:" in message or "Resume training with:" in message)
        )


_TUNE_RUN_LOGGER = "ray.tune.tune"


def quiet_libraries() -> None:
    """Keep the libraries' noise out of the terminal through their own settings: Tune's
    warnings that a loop step was slow (``TUNE_WARN_THRESHOLD_S``, which ``gridsearch.run``
    sets before Tune is imported, and this applies where Tune was imported earlier), and
    the grid sampler's ``Study.stop`` error (``_GridSamplerStop``), Tune's advice on restoring an
    interrupted experiment (``_TuneRestoreAdvice``). Ray's token-authentication notice
    is answered where Ray starts (``cluster.start_ray``). Idempotent."""
    # Tune reads its threshold once, when first imported: where that came before
    # gridsearch.run (a notebook, a test process), its 0.5 s default stands; raise it here
    from ray.tune.utils.util import warn_if_slow

    threshold = float(os.environ.get("TUNE_WARN_THRESHOLD_S", "0.5"))
    warn_if_slow.DEFAULT_THRESHOLD = max(warn_if_slow.DEFAULT_THRESHOLD, threshold)
    for name, kind in ((_OPTUNA_SEARCH_LOGGER, _GridSamplerStop),
                       (_TUNE_RUN_LOGGER, _TuneRestoreAdvice)):  # fmt: skip
        logger = logging.getLogger(name)
        if not any(isinstance(f, kind) for f in logger.filters):
            logger.addFilter(kind())
