"""What a finished search found: the best trial per objective and the Pareto front of
dev retrieval against the dev semantic score; and the commands that look at it (MLflow's
UI, the report, Optuna's dashboard). Computing only; ``gridsearch.run`` prints."""

from __future__ import annotations

import importlib.util
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gridsearch._outcome import Failures
from gridsearch.settings import SearchSettings
from trainables import names

__all__ = [
    "BASELINE_LABELS",
    "OUTCOME_WORDS",
    "TrialOutcome",
    "baseline_lines",
    "best_trial",
    "closing_commands",
    "dashboard_command",
    "format_summary",
    "key_value",
    "pareto_front",
    "ray_dashboard_line",
    "report_command",
    "retry_lines",
    "without_password",
]


@dataclass(frozen=True)
class TrialOutcome:
    trial_id: str
    config: Mapping[str, Any]  # the searched parameters (not the fixed ones)
    metrics: Mapping[str, float]  # the trial's last report
    status: str  # finished, stopped_early, failed
    failures: Failures = field(default_factory=Failures)  # how often it failed, and why

    @property
    def retried(self) -> bool:
        """It failed and was run again (whatever its outcome)."""
        return self.failures.retries(self.status == "failed") > 0

    @property
    def retrieval(self) -> float:
        return float(self.metrics.get(names.BEST_RETRIEVAL, math.nan))

    @property
    def semantic(self) -> float:
        return float(self.metrics.get(names.BEST_SEMANTIC, math.nan))


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates (both coordinates maximised),
    sorted by the first coordinate, descending. NaN points are never on the front."""
    valid = [i for i, (x, y) in enumerate(points) if not (math.isnan(x) or math.isnan(y))]
    front = [
        i
        for i in valid
        if not any(
            points[j][0] >= points[i][0] and points[j][1] >= points[i][1] and points[j] != points[i]
            for j in valid
        )
    ]
    return sorted(front, key=lambda i: (-points[i][0], -points[i][1]))


def best_trial(outcomes: Sequence[TrialOutcome], metric: str) -> TrialOutcome | None:
    """The outcome with the highest ``metric`` (one without it never wins). A tie goes to
    the better other objective (dev R@10 mean and dev semantic score break each other's
    ties), then to the smaller trial id: the pick does not depend on the order the
    outcomes come in (the search's end and MLflow list them differently)."""
    scored = [o for o in outcomes if not math.isnan(float(o.metrics.get(metric, math.nan)))]

    def rank(o: TrialOutcome) -> tuple[float | str, ...]:
        others = {
            names.BEST_RETRIEVAL: (o.semantic,),
            names.BEST_SEMANTIC: (o.retrieval,),
        }.get(metric, (o.retrieval, o.semantic))
        lowest = (-math.inf if math.isnan(v) else v for v in others)
        return (-float(o.metrics[metric]), *(-v for v in lowest), o.trial_id)

    return min(scored, key=rank, default=None)


# how the summary says each outcome (gridsearch._outcome: the tags' values)
OUTCOME_WORDS = {
    "finished": "finished",
    "stopped_early": "stopped early",
    "failed": "failed",
    "search_ended": "unfinished",
    "abandoned": "abandoned",
}


def format_summary(
    outcomes: Sequence[TrialOutcome],
    objective: str,
    baselines: Mapping[str, Mapping[str, float]] | None = None,
) -> str:
    """The end-of-search report: counts, the best trial per objective, for
    ``objective == "both"`` the Pareto front, and the best trials' test numbers against
    the store's ``baselines`` (``trainables.baselines``)."""
    counts: dict[str, int] = {}
    for outcome in outcomes:  # a retried trial is counted apart from those that were not
        status = OUTCOME_WORDS.get(outcome.status, outcome.status)
        status += " after a retry" if outcome.retried else ""
        counts[status] = counts.get(status, 0) + 1
    trials = f"{len(outcomes)} trial{'' if len(outcomes) == 1 else 's'}"
    lines = [f"{trials}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))]
    lines += retry_lines(outcomes)
    for label, metric in (("retrieval", names.BEST_RETRIEVAL), ("semantic", names.BEST_SEMANTIC)):
        best = best_trial(outcomes, metric)
        if best is not None:
            test = best.metrics.get(names.FINISHED)
            lines.append(
                f"best {label:<9} {best.trial_id}: {metric} {best.metrics[metric]:.3f}"
                + _spread(best.metrics, metric, ".3f")
                + (f", test R@10 mean {test:.1f}" if test is not None else "")
                + _spread(best.metrics, names.FINISHED, ".1f")
                + f"  {_params(best.config)}"
            )
    if objective == "both":
        front = pareto_front([(o.retrieval, o.semantic) for o in outcomes])
        lines.append("Pareto front (dev R@10 mean best, dev semantic best):")
        lines += [
            f"  {outcomes[i].trial_id}: {outcomes[i].retrieval:6.2f}  "
            f"{outcomes[i].semantic:.4f}  {_params(outcomes[i].config)}"
            for i in front
        ]
    if baselines:
        lines += baseline_lines(outcomes, baselines)
    return "\n".join(lines)


_RETRIES_SHOWN = 10  # retried trials named in the summary; the rest counted


def retry_lines(outcomes: Sequence[TrialOutcome]) -> list[str]:
    """A line per trial that failed and was run again: how often, the last cause, and
    how it ended (its run's ``failures`` and ``last_failure`` tags say the same)."""
    retried = [o for o in outcomes if o.retried]
    lines = []
    for outcome in retried[:_RETRIES_SHOWN]:
        count = outcome.failures.count
        times = "once" if count == 1 else f"{count} times"
        cause = f" ({outcome.failures.last})" if outcome.failures.last else ""
        failed = outcome.status == "failed"
        words = OUTCOME_WORDS.get(outcome.status, outcome.status)
        end = "and then given up (failed)" if failed else f"then {words}"
        lines.append(f"  retried {outcome.trial_id}: failed {times}{cause}, {end}")
    if len(retried) > _RETRIES_SHOWN:
        more = len(retried) - _RETRIES_SHOWN
        lines.append(f"  and {more} more retried (their runs' failures tag)")
    return lines


# what a baseline is called on screen, and the test metrics the best trials are held to
BASELINE_LABELS = {
    "ngram_ridge": "char n-gram ridge",
    "char_ngrams": "char n-gram cosine",
    "chance": "chance",
}
_TEST_R10, _TEST_SEMANTIC = names.key(names.TEST, "r10_mean"), names.key(names.TEST, "semantic")
_ENSEMBLE_SEMANTIC = names.key(names.ENSEMBLE, "semantic")


def baseline_lines(
    outcomes: Sequence[TrialOutcome], baselines: Mapping[str, Mapping[str, float]]
) -> list[str]:
    """The baselines' test R@10 mean and semantic score, then whether the best trials'
    snapshot ensembles beat each (the best-retrieval trial on R@10 mean, the
    best-semantic trial on the semantic score; test numbers, reported, never selected on)."""
    shown = []
    for name, label in BASELINE_LABELS.items():
        values = baselines.get(name, {})
        parts = [
            f"{what} {values[key]:{spec}}"
            for what, key, spec in (
                ("R@10 mean", _TEST_R10, ".1f"),
                ("semantic", _TEST_SEMANTIC, ".3f"),
            )
            if key in values and not math.isnan(values[key])
        ]
        if parts:
            shown.append(f"{label} {', '.join(parts)}")
    lines = [f"baselines (test; python -m trainables.baselines): {'; '.join(shown)}"]
    for label, what, metric, trial_key, baseline_key, spec in (
        ("retrieval", "R@10 mean", names.BEST_RETRIEVAL, names.FINISHED, _TEST_R10, ".1f"),
        ("semantic", "semantic", names.BEST_SEMANTIC, _ENSEMBLE_SEMANTIC, _TEST_SEMANTIC, ".3f"),
    ):
        best = best_trial(outcomes, metric)
        value = float(best.metrics.get(trial_key, math.nan)) if best else math.nan
        if best is None or math.isnan(value):
            continue
        verdicts = [
            f"{'above' if value > ref else 'BELOW'} {BASELINE_LABELS[name]} ({ref:{spec}})"
            for name in BASELINE_LABELS
            if name != "chance"
            and not math.isnan(ref := float(baselines.get(name, {}).get(baseline_key, math.nan)))
        ]
        if verdicts:
            lines.append(
                f"  best {label} trial {best.trial_id}: test {what} {value:{spec}}, "
                + ", ".join(verdicts)
            )
    return lines


def _spread(metrics: Mapping[str, float], metric: str, spec: str) -> str:
    """ " ± sd over seeds" when the trial trained at several seeds (``trainables.group``)."""
    sd = metrics.get(names.spread(metric))
    return "" if sd is None else f" ± {sd:{spec}} (sd over seeds)"


def key_value(key: str, value: Any) -> str:
    """``key=value`` as every line that names what a trial tried writes it (a float to 4
    significant digits)."""
    return f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}"


def _params(config: Mapping[str, Any]) -> str:
    return " ".join(key_value(k, v) for k, v in sorted(config.items()))


def report_command(settings: SearchSettings, *, partial: bool = False) -> str:
    """The exact ``analysis.report`` command for the search (``--partial`` when no trial
    has finished yet)."""
    words = [
        "python -m analysis.report",
        f"--runs-dir {shlex.quote(str(settings.layout.root))}",
        f"--experiment {settings.experiment}",
    ]
    if settings.tracking_uri != settings.layout.tracking_uri:
        words.append(f"--tracking-uri {shlex.quote(without_password(settings.tracking_uri))}")
    if partial:
        words.append("--partial")
    return " ".join(words)


def dashboard_command(settings: SearchSettings) -> str:
    """The exact ``optuna-dashboard`` command that shows the search's Optuna study (a
    password in a database URL shown as ``***``)."""
    return f"optuna-dashboard {shlex.quote(without_password(settings.optuna_storage))}"


def closing_commands(settings: SearchSettings, *, partial: bool = False) -> list[tuple[str, str]]:
    """``(what, command)`` for the search's closing lines: MLflow's UI, the report and
    Optuna's dashboard (with how to install it when it is not)."""
    dashboard = dashboard_command(settings)
    if importlib.util.find_spec("optuna_dashboard") is None:
        dashboard += "   (pip install optuna-dashboard)"
    tracking = without_password(settings.tracking_uri)
    runs = (
        f"open {tracking} (the MLflow server)"
        if tracking.startswith(("http://", "https://"))
        else f"mlflow ui --backend-store-uri {shlex.quote(tracking)}"
    )
    return [
        ("compare the runs", runs),
        ("write its report", report_command(settings, partial=partial)),
        ("its Optuna study", dashboard),
    ]


def ray_dashboard_line(settings: SearchSettings, url: str) -> str:
    """Where the search's Ray dashboard was and how long it lives: a joined cluster's
    stays up with it; the local Ray a search starts stops when the search ends (a smoke
    search's lived about a minute), so the line says how to keep one up."""
    if settings.address:
        return f"Ray dashboard:  {url} (the cluster's: up as long as the cluster is)"
    return (
        f"Ray dashboard:  {url} stopped with the search (its local Ray ends with it). To keep "
        f"one up, to watch a search or look back at it: `ray start --head --dashboard-host "
        f"{settings.dashboard_host}` (up until `ray stop`; `ray get-auth-token` prints its "
        "login token), then run the search with --address auto"
    )


def without_password(url: str) -> str:
    """``postgresql://user:secret@host/db`` -> ``postgresql://user:***@host/db``."""
    return re.sub(r"^([a-z0-9+.-]+://[^:/@]*:)[^@/]*@", r"\1***@", url, flags=re.IGNORECASE)
