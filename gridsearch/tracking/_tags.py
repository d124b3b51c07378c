"""The MLflow tags a search writes, spelled once; dependency-free, so ``analysis`` reads
a search without importing Ray or torch."""

from __future__ import annotations

__all__ = [
    "BEST_TRIAL_TAG",
    "CHARTS_VIEW",
    "ERROR_TAG",
    "EXPERIMENT_KIND",
    "EXPERIMENT_KIND_TAG",
    "FAILURES_TAG",
    "LAST_FAILURE_TAG",
    "OPTUNA_STUDY_TAG",
    "OPTUNA_TRIAL_TAG",
    "OUTCOME_RUNNING",
    "OUTCOME_TAG",
    "PARENT_TAG",
    "RESULTS_VIEW",
    "RETRIED_TRIALS_TAG",
    "ROLE_SEARCH",
    "ROLE_TAG",
    "ROLE_TRIAL",
    "RUN_COLOUR_TAG",
    "TRACKING_RETRIES_TAG",
    "TRADEOFF_IMAGE",
    "TRIAL_COLOURS",
    "TRIAL_TAG",
    "VIEW_TAG_PREFIX",
    "best_trial_tag",
]

PARENT_TAG = "mlflow.parentRunId"  # MLflow's own: nests a trial's run under the search's
ROLE_TAG = "search.role"  # ROLE_SEARCH (the parent run) or ROLE_TRIAL
ROLE_SEARCH = "search"
ROLE_TRIAL = "trial"
TRIAL_TAG = "tune.trial_id"  # a trial's run is found again by its Tune trial id
# A trial's run names its Optuna study and trial (whose user attributes name the run and
# the Tune trial back: gridsearch._optuna).
OPTUNA_STUDY_TAG = "optuna.study"
OPTUNA_TRIAL_TAG = "optuna.trial_number"
# a trial's Outcome value (gridsearch._outcome); the parent's finished, failed or
# interrupted (_parent); OUTCOME_RUNNING on either while it runs
OUTCOME_TAG = "outcome"
OUTCOME_RUNNING = "running"
ERROR_TAG = "error"  # a failed or abandoned trial's error, its last 5,000 characters
# A trial that failed and was retried (whatever its outcome): how often it failed, and the
# last failure's cause in a line (gridsearch._outcome.Failures); set when Tune retries it.
FAILURES_TAG = "failures"
LAST_FAILURE_TAG = "last_failure"
# On the parent run: how many trials were retried after a failure, and what the tracking
# store's writes went through (written again, refused), in a line; set at the search's end.
RETRIED_TRIALS_TAG = "retried_trials"
TRACKING_RETRIES_TAG = "tracking_retries"
# On the parent run: BEST_TRIAL_TAG + "." + an objective metric -> the Tune trial id whose
# value of that metric the parent run shows.
BEST_TRIAL_TAG = "best_trial"

# Experiment tags read by MLflow's UI (mlflow 3.17: the keys and values of its JavaScript
# build, mlflow/server/js). The kind marks a model-training ("Machine learning")
# experiment rather than a GenAI one.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
# A saved runs-table view is an experiment tag VIEW_TAG_PREFIX + its key; the UI opens it
# from the URL parameter ``viewStateShareKey`` and lists it under "Views".
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
RESULTS_VIEW = "search-results"  # the key of the view a search writes
CHARTS_VIEW = "search-charts"  # the key of its chart view (_curves.charts_view)
# A run's colour in every chart and list of the UI (a run without one gets a colour from a
# hash of its id, which can give two trials one colour, or two shades of it). Each
# trial takes the next of TRIAL_COLOURS, in the order their runs were created: ten
# colours of the UI's own palette, told apart at a glance (blue, orange, green, red,
# purple, brown, pink, near-black, teal, gold).
RUN_COLOUR_TAG = "mlflow.runColor"
TRIAL_COLOURS = (
    "#2272b4", "#de7921", "#3ba65e", "#c83243", "#8a63bf",
    "#a6630c", "#e65b77", "#1f272d", "#04867d", "#facb66",
)  # fmt: skip
# The image key (MlflowClient.log_image) of a trial's dev semantic score against its dev
# R@10 mean, epoch by epoch (_curves.trajectory_figure), which the chart view shows
TRADEOFF_IMAGE = "tradeoff"


def best_trial_tag(metric: str) -> str:
    """``best_trial_tag("dev/r10_mean_best") == "best_trial.dev/r10_mean_best"``."""
    return f"{BEST_TRIAL_TAG}.{metric}"
