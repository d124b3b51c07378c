"""How the search's progress lines say things (``gridsearch.progress``): which of a
trial's keys say what it tried (``shown_keys``) and how, a selection metric's value, a
running trial's epoch, how a fused trial's members ended. Functions of what they are
given: the printer's state (numbering, members, the estimate) is ``ProgressPrinter``'s."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ray.tune.experiment import Trial

from gridsearch._space import SearchSpace
from gridsearch.summary import key_value
from trainables import names
from trainables.config import TrainConfig

__all__ = [
    "EPOCH_METRICS",
    "LABELS",
    "ends_text",
    "label_text",
    "number",
    "running_text",
    "shown_keys",
    "value_text",
]

# how the selection metrics are named on screen
LABELS = {
    names.selectable(names.BEST_RETRIEVAL): ("dev R@10 mean", ".1f"),
    names.selectable(names.BEST_SEMANTIC): ("dev semantic", ".3f"),
}
EPOCH_METRICS = (
    ("dev R@10 mean", names.PRIMARY_RETRIEVAL, ".1f"),
    ("dev semantic", names.PRIMARY_SEMANTIC, ".3f"),
)


def shown_keys(space: SearchSpace) -> list[str]:
    """The keys of a trial's config that say what it tried: the space's own parameters
    (``family``, ``system``, ``variant``, ``margin``...), not every key a preset or a
    variant sets. A numeric helper parameter (``lr_min_position``, ``lr_max_sum``) is
    shown through the TrainConfig keys the space decodes it into (``lr_min``,
    ``lr_max``)."""
    params = space.to_dict()["params"]
    fields = set(TrainConfig.field_names())
    numeric_helpers = {
        p
        for p, described in params.items()
        if p not in fields and described["type"] != "categorical"
    }
    keys = [p for p in params if p not in numeric_helpers]
    if numeric_helpers:
        keys += [k for k in space.searched_keys() if k not in params]
    return keys


def label_text(config: Mapping[str, Any], shown: Sequence[str]) -> str:
    """What a configuration tried: its ``shown`` keys (``shown_keys``), ``key=value``."""
    return " ".join(key_value(k, config[k]) for k in shown if k in config)


def ends_text(last: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> str:
    """How a fused trial's members ended (their last reports, by position), and the
    best of them."""
    finished = sum(names.is_finished(report) for report in last)
    ends = [f"{finished} finished"] if finished else []
    if finished < len(last):
        ends.append(f"{len(last) - finished} stopped early")
    best = []
    for metric in metrics:
        values = [number(report.get(metric)) for report in last]
        scored = [(v, p) for p, v in enumerate(values) if v is not None]
        if scored:
            value, position = max(scored, key=lambda pair: pair[0])
            best.append(f"{value_text(metric, {metric: value})} (m{position})")
    return ", ".join(ends) + (f"; best {', '.join(best)}" if best else "")


def value_text(metric: str, result: Mapping[str, Any]) -> str:
    label, spec = LABELS.get(metric, (metric, ".4g"))
    return f"{label} {float(result[metric]):{spec}}"


def running_text(trial: Trial, in_epoch: Mapping[str, Mapping[str, float]], epochs: int) -> str:
    """A running trial's epoch of ``epochs`` (and the share of it done, ``in_epoch``)."""
    now = in_epoch.get(trial.trial_id)
    reported = int((trial.last_result or {}).get("epoch", -1))
    if now is not None and int(now["epoch"]) == reported + 1 and reported < epochs:
        return f"{trial.trial_id} epoch {int(now['epoch'])}/{epochs} {now['done']:.0%}"
    if reported < 0:
        return f"{trial.trial_id} starting"
    return f"{trial.trial_id} epoch {min(reported + 1, epochs)}/{epochs}"


def number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number
