"""Space-filling starts, then TPE: the sampler of every named space without a grid.

TPE's own start-up draws its first trials uniformly at random, so a small budget (the
default margin sweep is 4 trials on a CPU) can land every trial in one corner: margins
0.372, 0.297, 0.321 and 0.295 in one real run. Here the first ``startup`` trials are a
Latin hypercube with centred points instead: each parameter's range is cut into
``startup`` equal strata (on the log axis for a log-scaled parameter) and trial k takes
the midpoint of stratum ``perm_p[k]``, ``perm_p`` a seeded permutation per parameter.
So every parameter on its own takes ``startup`` values exactly ``range / startup`` apart
(never two closer), and a categorical parameter takes each choice equally often (within
one). After them TPE models the finished trials as usual (or, with ``model="gp"``,
Optuna's Gaussian-process sampler).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.samplers import BaseSampler, GPSampler, TPESampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

__all__ = ["MODELS", "STARTUP_TRIALS", "SpaceFillingSampler", "stratum_values"]

STARTUP_TRIALS = 10  # TPE's own default start-up: the space-filling phase is at most this
MODELS = ("tpe", "gp")  # what models the trials after the start-up


class SpaceFillingSampler(BaseSampler):
    """The first ``startup`` trials (by trial number) from a centred Latin hypercube,
    then Optuna's TPE (multi-objective when the study is), or its GP sampler with
    ``model="gp"``, seeded by ``seed``."""

    def __init__(self, startup: int, seed: int, model: str = "tpe") -> None:
        if startup < 1:
            raise ValueError(f"startup: got {startup}, expected at least 1 trial")
        if model not in MODELS:
            raise ValueError(f"model: got {model!r}, expected one of {MODELS}")
        self.startup = startup
        self.seed = seed
        self.model = model
        self._tpe: BaseSampler = (
            TPESampler(seed=seed, n_startup_trials=startup)
            if model == "tpe"
            else GPSampler(seed=seed, n_startup_trials=startup, warn_independent_sampling=False)
        )

    def _starting(self, trial: FrozenTrial) -> bool:
        return trial.number < self.startup

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        if self._starting(trial):
            return {}
        return self._tpe.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if self._starting(trial):
            return {}
        return self._tpe.sample_relative(study, trial, search_space)

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        if not self._starting(trial):
            return self._tpe.sample_independent(study, trial, param_name, param_distribution)
        stratum = _permutation(self.seed, param_name, self.startup)[trial.number]
        return stratum_values(param_distribution, self.startup)[stratum]

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self._tpe.before_trial(study, trial)

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self._tpe.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._tpe.reseed_rng()


def _permutation(seed: int, param_name: str, size: int) -> np.ndarray:
    """Which stratum each start-up trial takes for ``param_name``: a fixed function of
    the seed and the name, so a resumed study continues the same design."""
    rng = np.random.default_rng([seed, zlib.crc32(param_name.encode())])
    return rng.permutation(size)


def stratum_values(distribution: BaseDistribution, count: int) -> list[Any]:
    """``count`` values spread evenly over ``distribution``: the midpoints of ``count``
    equal strata of a float range (of its log for a log-scaled one; a stepped range's
    midpoints rounded onto its steps), of an integer range (rounded; a range with fewer
    integers than strata repeats them evenly), and for choices each choice in turn.

    >>> stratum_values(FloatDistribution(0.05, 0.5), 4)
    [0.10625, 0.21875, 0.33125, 0.44375]
    """
    centres = [(k + 0.5) / count for k in range(count)]
    if isinstance(distribution, CategoricalDistribution):
        choices = distribution.choices
        return [choices[k % len(choices)] for k in range(count)]
    if isinstance(distribution, FloatDistribution | IntDistribution):
        low, high = float(distribution.low), float(distribution.high)
        if distribution.log:
            values = [
                math.exp(math.log(low) + c * (math.log(high) - math.log(low))) for c in centres
            ]
        else:
            values = [low + c * (high - low) for c in centres]
        step = distribution.step
        if isinstance(distribution, IntDistribution):
            step = step or 1
            return [int(min(max(low + round((v - low) / step) * step, low), high)) for v in values]
        if step is not None:
            values = [min(max(low + round((v - low) / step) * step, low), high) for v in values]
        return [float(f"{v:.12g}") for v in values]  # 0.10625, not 0.10625000000000001
    raise TypeError(f"stratum_values: unsupported distribution {distribution!r}")
