"""MLflow tracking of a search, written by the driver only: one parent run per search and
one nested run per trial.

- ``_callback``: ``TrialTracker``, the Tune callback that turns Tune's events into writes
  of ``_runs`` queued in ``_write_queue``, and links each run to its Optuna trial;
- ``_runs``: a trial's run, found again by its Tune trial id, each epoch once, closed once
  with its outcome and ``_artifacts`` (config, trade-off plot, ensemble);
- ``_write_queue``: the retrying writer, so a store that goes away never stops training;
- ``_reconcile``: MLflow made to agree with Tune's experiment after a search or a resume;
- ``_store``: the store checked, the experiment, the parent run, the UI's links and views;
- ``_parent``: what the parent run records at the start and the end;
- ``_lineage``: the feature store as every run's dataset input;
- ``_tags``: the tag names (dependency-free); ``_curves``: the trade-off curves, their
  scale (the trained epochs, every epoch ticked) and MLflow's chart view of them.

Each name is imported on first use, so reading a search (the tags, the store helpers,
``TradeoffCurve``) imports neither Ray nor torch; ``TrialTracker`` imports Ray.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gridsearch.tracking._callback import TrialTracker
    from gridsearch.tracking._curves import (
        EPOCH_ZERO_AT,
        TITLE_WIDTH,
        AxisRange,
        CurveScale,
        TradeoffCurve,
        charts_url,
        curve_scale,
        epoch_axis,
        tradeoff_curve,
        tradeoff_figure,
        untrained_note,
    )
    from gridsearch.tracking._parent import close_parent, parent_params
    from gridsearch.tracking._store import (
        TrackingError,
        check_reachable,
        ensure_experiment,
        forget_database,
        results_link,
        results_url,
        start_parent_run,
        using_tracking_uri,
    )
    from gridsearch.tracking._tags import (
        CHARTS_VIEW,
        OUTCOME_TAG,
        PARENT_TAG,
        ROLE_SEARCH,
        ROLE_TAG,
        ROLE_TRIAL,
        TRIAL_TAG,
        best_trial_tag,
    )

_HOMES = {
    "gridsearch.tracking._callback": ["TrialTracker"],
    "gridsearch.tracking._curves": [
        "EPOCH_ZERO_AT",
        "TITLE_WIDTH",
        "AxisRange",
        "CurveScale",
        "TradeoffCurve",
        "charts_url",
        "curve_scale",
        "epoch_axis",
        "tradeoff_curve",
        "tradeoff_figure",
        "untrained_note",
    ],
    "gridsearch.tracking._parent": ["close_parent", "parent_params"],
    "gridsearch.tracking._store": [
        "TrackingError",
        "check_reachable",
        "ensure_experiment",
        "forget_database",
        "results_link",
        "results_url",
        "start_parent_run",
        "using_tracking_uri",
    ],
    "gridsearch.tracking._tags": [
        "CHARTS_VIEW",
        "OUTCOME_TAG",
        "PARENT_TAG",
        "ROLE_SEARCH",
        "ROLE_TAG",
        "ROLE_TRIAL",
        "TRIAL_TAG",
        "best_trial_tag",
    ],
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "CHARTS_VIEW",
    "EPOCH_ZERO_AT",
    "OUTCOME_TAG",
    "PARENT_TAG",
    "ROLE_SEARCH",
    "ROLE_TAG",
    "ROLE_TRIAL",
    "TITLE_WIDTH",
    "TRIAL_TAG",
    "AxisRange",
    "CurveScale",
    "TrackingError",
    "TradeoffCurve",
    "TrialTracker",
    "best_trial_tag",
    "charts_url",
    "check_reachable",
    "close_parent",
    "curve_scale",
    "ensure_experiment",
    "epoch_axis",
    "forget_database",
    "parent_params",
    "results_link",
    "results_url",
    "start_parent_run",
    "tradeoff_curve",
    "tradeoff_figure",
    "untrained_note",
    "using_tracking_uri",
]


def __getattr__(name: str) -> Any:
    """``gridsearch.tracking.NAME``: imported from its module on first use (see the
    docstring)."""
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'gridsearch.tracking' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
