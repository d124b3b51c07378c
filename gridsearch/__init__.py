"""The distributed hyperparameter search: Ray Tune trials, Optuna samplers, MLflow
tracking."""
