"""The MLflow tags a search writes, spelled once; dependency-free, so ``analysis`` reads
a search without importing Ray or torch."""

from __future__ import annotations

__all__ = [
    "ERROR_TAG",
    "OUTCOME_TAG",
    "PARENT_TAG",
    "ROLE_SEARCH",
    "ROLE_TAG",
    "ROLE_TRIAL",
    "TRIAL_TAG",
]

PARENT_TAG = "mlflow.parentRunId"  # MLflow's own: nests a trial's run under the search's
ROLE_TAG = "search.role"  # ROLE_SEARCH (the parent run) or ROLE_TRIAL
ROLE_SEARCH = "search"
ROLE_TRIAL = "trial"
TRIAL_TAG = "tune.trial_id"  # a trial's run is found again by its Tune trial id
OUTCOME_TAG = "outcome"  # an Outcome value (gridsearch._outcome)
ERROR_TAG = "error"  # a failed or abandoned trial's error, its last 5,000 characters
