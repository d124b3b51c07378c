"""The search-strategy comparison of ``bench/bench_strategies.py``, in parts: the recorded
problem as the searches see it (:mod:`.problem`), what a search did (:mod:`.events`),
Optuna's pruners under Tune (:mod:`.pruning`), the strategies (:mod:`.catalogue`), one whole
search (:mod:`.search`) and the curves and tables of the results (:mod:`.curves`)."""

from __future__ import annotations

import os

# As gridsearch.run sets them, before Ray is imported.
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

from bench._strategies.catalogue import (
    BOTH,
    OURS,
    SEEDS_PER_CONFIG,
    STRATEGIES,
    build,
    default_strategies,
    known,
    scheduler_of,
)
from bench._strategies.curves import (
    HELD_OUT,
    WITHIN,
    grid_front,
    heldout_curves,
    percent_curves,
    plot,
    report,
)
from bench._strategies.events import Events, SavedSearches
from bench._strategies.problem import FORMS, Parts, decoder, space
from bench._strategies.pruning import OptunaPruning, optuna_pruner
from bench._strategies.search import run_one, warm_start_from

__all__ = [
    "BOTH", "FORMS", "HELD_OUT", "OURS", "SEEDS_PER_CONFIG", "STRATEGIES", "WITHIN", "Events",
    "OptunaPruning", "Parts", "SavedSearches", "build", "decoder", "default_strategies",
    "grid_front", "heldout_curves", "known", "optuna_pruner", "percent_curves", "plot", "report",
    "run_one", "scheduler_of", "space", "warm_start_from",
]  # fmt: skip
