"""The recorded problem as the searches see it: its variants and margins as two choices
(the ``variant`` form) or each parameter as the driver's spaces search it (``parts``)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import optuna

from bench import tabular
from gridsearch.spaces import SearchSpace

FORMS = ("variant", "parts")


class Suggest:
    """The define-by-run space of the recorded problem in its ``variant`` form: variant
    and margin, both categorical, decoded as ``bench_search_efficiency.VariantMargin``
    does (Optuna puts the variant's name beside the decoded keys, where the replay looks
    it up)."""

    def __init__(self, variants: dict[str, dict[str, Any]], margins: Sequence[float]) -> None:
        self.variants, self.margins = dict(variants), tuple(margins)

    def __call__(self, trial: Any) -> dict[str, Any]:
        variant = trial.suggest_categorical("variant", tuple(self.variants))
        margin = trial.suggest_categorical("margin", self.margins)
        return {**self.variants[variant], "margin": margin}


MODEL_KEYS = ("hidden_size", "rnn_type", "pooling")  # a recorded variant's model: one choice
LOG_KEYS = ("lr_max", "lr_min")  # searched on a log axis by the driver's spaces


class Parts:
    """The recorded problem in its ``parts`` form: each parameter searched the way the
    driver's spaces search it, not the table's variants as one categorical.

    - ``model``: the variant's model (the name before any "/": "gru-32-max"), a choice,
      as ``paper_grid`` draws it;
    - ``lr_max``/``lr_min`` with 3+ recorded values: log-uniform floats, as
      ``gridsearch.spaces`` draws them, each value standing for the recorded one nearest
      on the log axis (the range reaches half a step past the end values, so every
      recorded value owns an equal share of it);
    - ``margin`` with 3+ evenly spaced values: a float on their step (the margin sweep's
      range, rounded as a space file's ``step`` rounds it);
    - anything else (``batch_size``, a 2-valued ``lr_min``): a choice, as in ``full``.

    So a sampler that models order (TPE on numbers) can use it; every draw decodes to a
    recorded (variant, margin)."""

    def __init__(self, table: tabular.RecordedTable) -> None:
        self.variants = {v: dict(table.manifest["variants"][v]) for v in table.variants}
        self.models = tuple(dict.fromkeys(v.split("/")[0] for v in self.variants))
        extra = [k for k in dict.fromkeys(k for c in self.variants.values() for k in c)
                 if k not in MODEL_KEYS]  # fmt: skip
        self.values = {k: sorted({c[k] for c in self.variants.values()}) for k in extra}
        self.margins = tuple(sorted(table.margins))
        self.lookup = {
            (name.split("/")[0], *(config[k] for k in extra)): name
            for name, config in self.variants.items()
        }
        if len(self.lookup) != len(self.variants) or len(self.lookup) != len(self.models) * (
            math.prod(len(v) for v in self.values.values())
        ):
            raise ValueError(f"{table.manifest.get('problem')}: the variants are not every "
                             "model x parameter combination; use the variant form")  # fmt: skip
        self._distributions = self._draws()

    def distributions(self) -> dict[str, optuna.distributions.BaseDistribution]:
        """Each parameter's distribution, in drawing order."""
        return dict(self._distributions)

    def _draws(self) -> dict[str, optuna.distributions.BaseDistribution]:
        out: dict[str, optuna.distributions.BaseDistribution] = {
            "model": optuna.distributions.CategoricalDistribution(self.models)
        }
        for key, values in self.values.items():
            if key in LOG_KEYS and len(values) >= 3:
                low, high = _log_range(values)
                out[key] = optuna.distributions.FloatDistribution(low, high, log=True)
            else:
                out[key] = optuna.distributions.CategoricalDistribution(values)
        step = _step(self.margins)
        out["margin"] = (
            optuna.distributions.FloatDistribution(self.margins[0], self.margins[-1], step=step)
            if step
            else optuna.distributions.CategoricalDistribution(self.margins)
        )
        return out

    def __call__(self, trial: Any) -> dict[str, Any]:
        drawn = {}
        for key, distribution in self._distributions.items():
            if isinstance(distribution, optuna.distributions.CategoricalDistribution):
                drawn[key] = trial.suggest_categorical(key, distribution.choices)
            else:
                assert isinstance(distribution, optuna.distributions.FloatDistribution)
                drawn[key] = trial.suggest_float(
                    key, distribution.low, distribution.high, log=distribution.log,
                    step=distribution.step,
                )  # fmt: skip
        variant, margin = self.decode(drawn)
        # Optuna puts the drawn values beside these (the replay decodes "model" and them)
        return {**self.variants[variant], "margin": margin}

    def decode(self, params: dict[str, Any]) -> tuple[str, float]:
        """The recorded (variant, margin) a draw stands for."""
        key = [params["model"]]
        for name, values in self.values.items():
            value = params[name]
            if isinstance(self._distributions[name], optuna.distributions.FloatDistribution):
                value = min(values, key=lambda v: abs(math.log(v) - math.log(params[name])))
            key.append(value)
        margin = min(self.margins, key=lambda m: abs(m - float(params["margin"])))
        return self.lookup[tuple(key)], margin

    def params_of(self, variant: str, margin: float) -> dict[str, Any]:
        """The draw that stands for a recorded (variant, margin): its own values."""
        config = self.variants[variant]
        return {"model": variant.split("/")[0], **{k: config[k] for k in self.values},
                "margin": margin}  # fmt: skip

    def grid(self) -> dict[str, Sequence[Any]]:
        return {"model": self.models, **self.values, "margin": self.margins}


def _log_range(values: Sequence[float]) -> tuple[float, float]:
    """Half a (log) step past each end of geometrically spread values."""
    logs = [math.log(v) for v in values]
    below, above = (logs[1] - logs[0]) / 2, (logs[-1] - logs[-2]) / 2
    return math.exp(logs[0] - below), math.exp(logs[-1] + above)


def _step(values: Sequence[float]) -> float | None:
    """The common step of 3+ evenly spaced values, else None."""
    if len(values) < 3:
        return None
    gaps = [b - a for a, b in itertools.pairwise(values)]
    return round(gaps[0], 9) if max(gaps) - min(gaps) < 1e-9 else None


def space(table: tabular.RecordedTable, grid: bool = False, form: str = "variant") -> SearchSpace:
    """The recorded problem's space in ``form`` (see :class:`Parts`); with ``grid``, its
    grid (which selects Optuna's grid sampler), else none (the other samplers)."""
    if form == "parts":
        parts = Parts(table)
        return SearchSpace("recorded", "a recorded problem, by parameter", parts,
                           grid=parts.grid() if grid else None)  # fmt: skip
    return SearchSpace(
        "recorded",
        "a recorded problem",
        Suggest({v: table.manifest["variants"][v] for v in table.variants}, table.margins),
        grid={"variant": table.variants, "margin": table.margins} if grid else None,
    )


def decoder(table: tabular.RecordedTable, form: str) -> Any:
    """A trial's config -> its recorded (variant, margin), in ``form`` (None: the
    config names them)."""
    return Parts(table).decode if form == "parts" else None
