"""A search space: an Optuna define-by-run function plus what it fixes.

A :class:`SearchSpace`'s ``suggest`` makes only ``trial.suggest_*`` calls and pure
arithmetic and returns TrainConfig keys; ``fixed`` holds the TrainConfig keys it sets for
every trial; grid-like spaces also carry the exact grid for
:class:`optuna.samplers.GridSampler`. Keys a space neither fixes nor suggests keep their
TrainConfig defaults, the paper's best. ``sample_config(space, trial)`` draws one
validated config.

Some spaces suggest helper parameters that are not TrainConfig keys (``variant`` in
``paper_grid``, ``lr_min_position`` and ``lr_max_sum``/``lr_max_mean``): ``suggest``
decodes them into TrainConfig keys, but Ray's ``OptunaSearch`` also puts them in every
trial's config; ``SearchSpace.helpers`` names them, so the trainable can set them apart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna import distributions
from optuna.samplers import RandomSampler
from optuna.storages import InMemoryStorage
from optuna.study import StudyDirection
from optuna.trial import BaseTrial

from trainables.config import TrainConfig

__all__ = ["SearchSpace", "Suggest", "sample_config", "split_trial_config"]

# Any optuna trial: a Trial, a FixedTrial (rebuild a config from stored params), or Ray's
# wrapper around a Trial.
Suggest = Callable[[BaseTrial], dict[str, Any]]
DRAWS = 32  # random draws that describe a space (enough for every conditional branch)


@dataclass(frozen=True)
class SearchSpace:
    name: str  # the registry / --space name
    description: str  # one line, shown by --list-spaces
    suggest: Suggest  # define-by-run: returns TrainConfig keys
    fixed: Mapping[str, Any] = field(default_factory=dict, hash=False)  # set in every trial
    grid: Mapping[str, Sequence[Any]] | None = field(default=None, hash=False)  # GridSampler's

    def __post_init__(self) -> None:
        unknown = sorted(map(str, set(self.fixed) - set(TrainConfig.field_names())))
        if unknown:
            raise ValueError(
                f"space {self.name!r}: fixed: unknown TrainConfig key(s) {', '.join(unknown)}; "
                f"allowed: {', '.join(TrainConfig.field_names())}"
            )

    def grid_size(self) -> int | None:
        """The number of grid points, or None for a space without a grid."""
        return None if self.grid is None else math.prod(len(v) for v in self.grid.values())

    def draws(self) -> list[tuple[optuna.trial.FrozenTrial, dict[str, Any]]]:
        """``DRAWS`` random draws of an in-memory study (seeded, so always the same): each
        trial's Optuna parameters and the TrainConfig keys ``suggest`` made of them."""
        storage = InMemoryStorage()
        verbosity = optuna.logging.get_verbosity()  # its INFO line of every study created
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            study_id = storage.create_new_study([StudyDirection.MINIMIZE])
        finally:
            optuna.logging.set_verbosity(verbosity)
        study = optuna.Study(
            storage.get_study_name_from_id(study_id), storage, sampler=RandomSampler(seed=0)
        )
        drawn = []
        for _ in range(DRAWS):
            trial = study.ask()
            suggested = self.suggest(trial)
            drawn.append((study.tell(trial, 0.0), suggested))
        return drawn

    def searched_keys(self) -> list[str]:
        """The TrainConfig keys the space sets per trial (not its helper parameters), in
        the order it suggests them."""
        keys: dict[str, None] = {}
        for _, suggested in self.draws():
            keys.update(dict.fromkeys(suggested))
        return list(keys)

    def helpers(self) -> list[str]:
        """The parameters it suggests that are not TrainConfig keys (see the module
        docstring): every trial's config holds them beside its TrainConfig keys."""
        fields = set(TrainConfig.field_names())
        found: dict[str, None] = {}
        for trial, _ in self.draws():
            found.update(dict.fromkeys(p for p in trial.params if p not in fields))
        return list(found)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able description: the distributions are read from ``draws()`` (every
        branch of a conditional space shows up); ``conditional`` names the parameters
        that only some trials suggest."""
        params: dict[str, dict[str, Any]] = {}
        counts: dict[str, int] = {}
        for trial, _ in self.draws():
            for param, distribution in trial.distributions.items():
                described = _distribution_to_dict(distribution)
                if params.setdefault(param, described) != described:
                    params[param] = {"type": "dynamic"}  # a range that moves with other values
                counts[param] = counts.get(param, 0) + 1
        return {
            "name": self.name,
            "description": self.description,
            "fixed": dict(self.fixed),
            "params": params,
            "conditional": sorted(p for p, count in counts.items() if count < DRAWS),
            "grid": None if self.grid is None else {k: list(v) for k, v in self.grid.items()},
            "grid_size": self.grid_size(),
        }


def _distribution_to_dict(distribution: distributions.BaseDistribution) -> dict[str, Any]:
    """A distribution in the space-file format (``log``/``step`` only when not default)."""
    if isinstance(distribution, distributions.CategoricalDistribution):
        return {"type": "categorical", "choices": list(distribution.choices)}
    assert isinstance(distribution, distributions.FloatDistribution | distributions.IntDistribution)
    kind = "int" if isinstance(distribution, distributions.IntDistribution) else "float"
    described: dict[str, Any] = {"type": kind, "low": distribution.low, "high": distribution.high}
    if distribution.log:
        described["log"] = True
    if distribution.step not in (None, 1):
        described["step"] = distribution.step
    return described


def sample_config(space: SearchSpace, trial: BaseTrial) -> dict[str, Any]:
    """``{**space.fixed, **space.suggest(trial)}``, checked by ``TrainConfig.from_dict``."""
    suggested = space.suggest(trial)
    both = sorted(set(space.fixed) & set(suggested))
    if both:
        raise ValueError(f"space {space.name!r}: key(s) both fixed and suggested: {both}")
    values = {**space.fixed, **suggested}
    try:
        config = TrainConfig.from_dict(values)
    except ValueError as exc:
        raise ValueError(f"space {space.name!r} gave an invalid config: {exc}") from exc
    return {key: getattr(config, key) for key in values}


def split_trial_config(config: Mapping[str, Any]) -> tuple[TrainConfig, dict[str, Any]]:
    """A Tune trial's config as its ``TrainConfig`` and everything else in it: the search
    space's helper parameters (e.g. paper_grid's ``variant``, which OptunaSearch puts in
    every config beside the TrainConfig keys the space decoded it into). The run records
    what Tune ran; the trainable itself refuses keys the space did not declare."""
    fields = set(TrainConfig.field_names())
    train = {k: v for k, v in config.items() if k in fields}
    return TrainConfig.from_dict(train), {k: v for k, v in config.items() if k not in fields}
