"""What a finished search found: the best trial per objective and the Pareto front of
dev retrieval against the dev semantic score. Computing only; printing is separate."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainables import names

__all__ = [
    "TrialOutcome",
    "best_trial",
    "format_summary",
    "pareto_front",
]


@dataclass(frozen=True)
class TrialOutcome:
    trial_id: str
    config: Mapping[str, Any]  # the searched parameters (not the fixed ones)
    metrics: Mapping[str, float]  # the trial's last report
    status: str  # finished, stopped_early, failed

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
    scored = [o for o in outcomes if not math.isnan(float(o.metrics.get(metric, math.nan)))]
    return max(scored, key=lambda o: float(o.metrics[metric]), default=None)


def format_summary(outcomes: Sequence[TrialOutcome], objective: str) -> str:
    """The end-of-search report: counts, the best trial per objective, and for
    ``objective == "both"`` the Pareto front."""
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    lines = [f"{len(outcomes)} trials: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))]
    for label, metric in (("retrieval", names.BEST_RETRIEVAL), ("semantic", names.BEST_SEMANTIC)):
        best = best_trial(outcomes, metric)
        if best is not None:
            test = best.metrics.get(names.FINISHED)
            lines.append(
                f"best {label:<9} {best.trial_id}: {metric} {best.metrics[metric]:.3f}"
                + (f", test R@10 mean {test:.1f}" if test is not None else "")
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
    return "\n".join(lines)


def _params(config: Mapping[str, Any]) -> str:
    return " ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(config.items())
    )
