"""What a search searched: its parameters, each continuous or categorical, and the
encoder families whose trials varied it, read from the trials' logged configurations."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from trainables.config import applicable
from trainables.presets import family_of

__all__ = ["CATEGORICAL", "CONTINUOUS", "FAMILY", "Searched", "searched_parameters", "space_params"]

logger = logging.getLogger(__name__)

CONTINUOUS, CATEGORICAL = "continuous", "categorical"
FAMILY = "family"  # the trials' column: trainables.presets.family_of of the run's params


class Searched(NamedTuple):
    kinds: dict[str, str]  # searched parameter -> CONTINUOUS or CATEGORICAL, in order
    families: dict[str, tuple[str, ...]]  # parameter -> the families that searched it


def space_params(space_definition: str | None) -> dict[str, Any]:
    """The parameters the space defines (its Optuna distributions), by name."""
    if not space_definition:
        return {}
    try:
        return dict(json.loads(space_definition).get("params", {}))
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
        logger.warning("unreadable space_definition parameter; ignored")
        return {}


def searched_parameters(
    configs: Sequence[Mapping[str, str]], defined: Mapping[str, Any] | None = None
) -> Searched:
    """What a search searched, from its trials' logged configurations (TrainConfig keys,
    MLflow's strings) and the parameters its space defines (``defined``).

    Trials are grouped by encoder family (``trainables.presets.family_of``). With more
    than one family the family is searched (categorical). A field is searched in a
    family when its values differ among that family's trials and the family has it
    (``trainables.config.applicable``): a value a preset fixes differs between families
    only, and a field a family does not have (``hidden_size`` on ``word_bow``) only
    carries its default there, so neither counts. With one family and nothing that
    varies (a single trial) the fields the space defines are listed. A space's helper
    parameters (``search.<name>``, e.g. paper_grid's variant) are left out: the space
    decodes them into TrainConfig keys, which are shown instead."""
    defined = dict(defined or {})
    groups: dict[str, list[Mapping[str, str]]] = {}
    for config in configs:
        groups.setdefault(family_of(config), []).append(config)
    values: dict[str, dict[str, set[str]]] = {}  # field -> family -> its values there
    for family, members in groups.items():
        for config in members:
            encoder = config.get("encoder", "char_rnn")
            for name, value in config.items():
                if not name.startswith("search.") and name in applicable({name: 0}, encoder):
                    values.setdefault(name, {}).setdefault(family, set()).add(value)
    families = {
        name: tuple(f for f in groups if len(by_family.get(f, ())) > 1)
        for name, by_family in values.items()
    }
    varying = [n for n, f in families.items() if f]
    if not varying and len(groups) == 1:
        varying = [n for n in values if n in defined]
        families = {n: tuple(groups) for n in varying}
    order = {n: i for i, n in enumerate(defined)}
    varying.sort(key=lambda n: (order.get(n, len(order)), n))
    kinds: dict[str, str] = {FAMILY: CATEGORICAL} if len(groups) > 1 else {}
    searched_in: dict[str, tuple[str, ...]] = {}
    for name in varying:
        seen = {v for f in families[name] for v in values[name][f]}
        numeric = all(_is_number(v) for v in seen)
        categorical = defined.get(name, {}).get("type") == "categorical" or not numeric
        kinds[name] = CATEGORICAL if categorical else CONTINUOUS
        if len(groups) > 1:
            searched_in[name] = families[name]
    return Searched(kinds, searched_in)


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False
