"""Reports from a finished search: trade-off curves, sensitivity, Pareto fronts and
paper-style tables, read back from MLflow (issue 5)."""
