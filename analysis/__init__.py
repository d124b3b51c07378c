"""Reports from a finished search: trade-off curves, sensitivity, Pareto fronts,
hyperparameter importances and paper-style tables read back from MLflow
(``python -m analysis.report``), and paired significance tests between two trials'
ensembles (``python -m analysis.compare``).

Computing is kept apart from drawing: ``load_search`` reads a search into data frames,
the functions below return data frames and named tuples of what the report shows, and
``analysis._figures`` draws them.
"""

from analysis._compute import (
    ParetoSet,
    margin_range_check,
    pareto_over_epochs,
    pareto_over_trials,
    sensitivity,
    tradeoff_curves,
)
from analysis._data import AnalysisError, SearchRecord, load_search, open_client
from analysis._importance import Importances, param_importances
from analysis._stats import Difference, mcnemar_exact, paired_bootstrap, steiger_z, williams_t
from analysis._tables import PaperTable, retrieval_table, semantic_table

__all__ = [
    "AnalysisError",
    "Difference",
    "Importances",
    "PaperTable",
    "ParetoSet",
    "SearchRecord",
    "load_search",
    "margin_range_check",
    "mcnemar_exact",
    "open_client",
    "paired_bootstrap",
    "param_importances",
    "pareto_over_epochs",
    "pareto_over_trials",
    "retrieval_table",
    "semantic_table",
    "sensitivity",
    "steiger_z",
    "tradeoff_curves",
    "williams_t",
]
