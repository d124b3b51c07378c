"""The distributed hyperparameter search: Ray Tune trials, Optuna samplers, MLflow
tracking.

The public face for the packages above it (``analysis``, the benchmarks, the docs'
scripts): what they may use of the search's layout, records, tracking store and tags
(the last two from ``gridsearch.tracking``, the MLflow tracking subpackage), and the
sampler and scheduler the benchmarks compare. Each name is imported on first use, so
``from gridsearch import RunsLayout`` (reading a search) imports neither Ray nor Optuna;
the sampler and scheduler names (``SpaceFillingSampler``, ``make_sampler``, ``searcher``,
``ResumableOptunaSearch``, ``warm_start``, ``quiet``, ``make_scheduler``,
``resolve_scheduler``) do.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gridsearch._layout import RunsLayout
    from gridsearch._optuna import (
        ResumableOptunaSearch,
        make_sampler,
        quiet,
        searcher,
        warm_start,
    )
    from gridsearch._record import latest_search
    from gridsearch._sampler import SpaceFillingSampler
    from gridsearch._scheduler import make_scheduler
    from gridsearch._scheduler_choice import resolve_scheduler
    from gridsearch.tracking import (
        OUTCOME_TAG,
        PARENT_TAG,
        ROLE_SEARCH,
        ROLE_TAG,
        ROLE_TRIAL,
        TRIAL_TAG,
        TrackingError,
        best_trial_tag,
        check_reachable,
        results_url,
        using_tracking_uri,
    )

_HOMES = {
    "gridsearch._layout": ["RunsLayout"],
    "gridsearch._optuna": [
        "ResumableOptunaSearch",
        "make_sampler",
        "quiet",
        "searcher",
        "warm_start",
    ],
    "gridsearch._record": ["latest_search"],
    "gridsearch._sampler": ["SpaceFillingSampler"],
    "gridsearch._scheduler": ["make_scheduler"],
    "gridsearch._scheduler_choice": ["resolve_scheduler"],
    "gridsearch.tracking": [
        "OUTCOME_TAG",
        "PARENT_TAG",
        "ROLE_SEARCH",
        "ROLE_TAG",
        "ROLE_TRIAL",
        "TRIAL_TAG",
        "TrackingError",
        "best_trial_tag",
        "check_reachable",
        "results_url",
        "using_tracking_uri",
    ],
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "OUTCOME_TAG",
    "PARENT_TAG",
    "ROLE_SEARCH",
    "ROLE_TAG",
    "ROLE_TRIAL",
    "TRIAL_TAG",
    "ResumableOptunaSearch",
    "RunsLayout",
    "SpaceFillingSampler",
    "TrackingError",
    "best_trial_tag",
    "check_reachable",
    "latest_search",
    "make_sampler",
    "make_scheduler",
    "quiet",
    "resolve_scheduler",
    "results_url",
    "searcher",
    "using_tracking_uri",
    "warm_start",
]


def __getattr__(name: str) -> Any:
    """``gridsearch.NAME``: imported from its module on first use (see the docstring)."""
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'gridsearch' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
