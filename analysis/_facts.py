"""What a search was, said in the report's opening lines: its space, the parameters it
searched (``searched_text``), its trials' outcomes, its data, semantic sets and tracking
store (``facts``; ``analysis.report`` writes them)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from analysis._data import SearchRecord
from analysis._families import FAMILY, family_order

__all__ = ["facts", "searched_text"]


def facts(record: SearchRecord) -> list[str]:
    params = record.parent_params
    outcomes = Counter(record.trials["outcome"])
    searched = searched_text(record)
    return [
        f"space {params.get('space', '?')}: searched {searched}; objective "
        f"{params.get('objective', '?')}; {params.get('sampler', '?')}, scheduler "
        f"{params.get('scheduler', '?')}; {params.get('epochs', '?')} epochs per trial",
        f"{len(record.trials)} trials: "
        + ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())),
        f"data: {params.get('data', '?')} (data set {record.dataset or 'unknown'}, "
        + ", ".join(f"{k} {v} images" for k, v in record.split_images.items())
        + f"); semantic sets: {_semantic_sets(params)}",
        f"tracking: {record.tracking_uri}, parent run {record.parent_run_id}; code "
        f"{params.get('code_version', '?')}; report written {time.strftime('%Y-%m-%d %H:%M')}",
    ]


def searched_text(record: SearchRecord) -> str:
    """The searched parameters, each with its kind and, when the trials are of several
    encoder families, which families searched it: ``family (categorical: char_rnn,
    word_bow), lr_max (categorical) in every family``."""
    every = set(family_order(record))
    parts = []
    for param, kind in record.param_kinds.items():
        families = record.searched_in.get(param)
        if param == FAMILY:
            parts.append(f"{param} ({kind}: {', '.join(family_order(record))})")
        elif families is None:
            parts.append(f"{param} ({kind})")
        else:
            where = "every family" if set(families) == every else ", ".join(families)
            parts.append(f"{param} ({kind}) in {where}")
    return ", ".join(parts) or "(none varies)"


def _semantic_sets(params: dict[str, str]) -> str:
    """The semantic sets' folder, said as the store's own when it lies inside the store
    (the embedded world's ``STORE/world/senteval``, not a second path to read)."""
    data, senteval = params.get("data"), params.get("senteval")
    if not senteval or senteval == "null":
        return "none"
    if data and "://" not in data and Path(senteval).is_relative_to(data):
        return f"the store's own ({Path(senteval).relative_to(data)} in it)"
    return senteval
