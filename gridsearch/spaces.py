"""The named hyperparameter search spaces (SPEC section 7) and user space files.

A :class:`SearchSpace` is an Optuna define-by-run function (``suggest``: only
``trial.suggest_*`` calls and pure arithmetic) plus the TrainConfig keys it fixes for every
trial; grid-like spaces also carry the exact grid for :class:`optuna.samplers.GridSampler`.
Keys a space neither fixes nor suggests keep their TrainConfig defaults, the paper's best.
``get_space(name)`` looks a space up in :data:`SPACES`; ``sample_config(space, trial)``
draws one validated config.

Some spaces suggest helper parameters that are not TrainConfig keys (``variant`` in
``paper_grid``, ``lr_min_position`` and ``lr_max_sum``/``lr_max_mean``); ``suggest`` returns
TrainConfig keys only. Ray's ``OptunaSearch`` merges every suggested value into the trial's
config, so keep only ``TrainConfig.field_names()`` before building the config.

A space file (``--space-file FILE``, ``.yaml``/``.yml`` or ``.toml``, parsed safely) names
TrainConfig keys; ``fixed`` is optional, ``description`` defaults to the file's name, and a
space whose parameters are all categorical gets a grid. Example space file (YAML; a
TOML file has the same keys)::

    name: my_margins
    description: margins around the paper's best on small models
    fixed:            # optional: TrainConfig keys fixed for every trial
      hidden_size: 256
    params:           # each a TrainConfig key
      margin: {type: float, low: 0.1, high: 0.3}
      lr_max: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}
      batch_size: {type: int, low: 32, high: 128, step: 32}
      rnn_type: {type: categorical, choices: [gru, lstm]}

``float`` takes ``low``, ``high`` and optionally ``log`` or ``step``; ``int`` the same
(``step`` defaults to 1); ``categorical`` takes ``choices``. YAML reads ``1e-4`` as a
string: write ``1.0e-4``.
"""

from __future__ import annotations

import math
import os
import tomllib
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna import distributions
from optuna.samplers import RandomSampler
from optuna.storages import InMemoryStorage
from optuna.study import StudyDirection
from optuna.trial import BaseTrial

from trainables.config import NEGATIVES, POOLINGS, REDUCTIONS, RNN_TYPES, TrainConfig

# Any optuna trial: a Trial, a FixedTrial (rebuild a config from stored params), or Ray's
# wrapper around a Trial.
Suggest = Callable[[BaseTrial], dict[str, Any]]


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

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able description: the distributions are read from trials of an in-memory
        study (32 random draws, so every branch of a conditional space shows up);
        ``conditional`` names the parameters that only some trials suggest."""
        storage = InMemoryStorage()  # not create_study, which logs every study it creates
        study_id = storage.create_new_study([StudyDirection.MINIMIZE])
        study_name = storage.get_study_name_from_id(study_id)
        study = optuna.Study(study_name, storage, sampler=RandomSampler(seed=0))
        params: dict[str, dict[str, Any]] = {}
        counts: dict[str, int] = {}
        draws = 32
        for _ in range(draws):
            trial = study.ask()
            self.suggest(trial)
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
            "conditional": sorted(p for p, count in counts.items() if count < draws),
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


# -- the named spaces (SPEC section 7) --

HIDDEN_SIZES = (512, 1024, 2048)  # n; the embedding size is 2n
BATCH_SIZES = (32, 64, 128)
MARGIN_RANGE = (0.05, 0.5)  # the paper found 0.15-0.25 stable around its best, 0.2
LR_MAX_RANGE = (1e-5, 1e-2)  # log-uniform; the paper's 1e-3 (Flickr8k) and 1e-4 (MSCOCO)
LR_MAX_RANGE_MEAN = (1e-4, 1e-1)  # lr_max's range for reduction="mean" (see _full)
LR_MIN_FLOOR = 1e-7
LR_MIN_DEPTH = 10.0  # lr_min is at least this many times below lr_max


def _suggest_lr_bounds(
    trial: BaseTrial, lr_max_name: str, low: float, high: float
) -> dict[str, float]:
    """lr_max log-uniform on [low, high]; given it, lr_min log-uniform on
    [LR_MIN_FLOOR, lr_max / LR_MIN_DEPTH], so lr_min < lr_max for every sample.

    lr_min's range moves with lr_max, but every trial must share one search space (TPE and
    GridSampler need fixed distributions), so the suggested parameter is lr_min's position
    on that log axis, uniform on [0, 1]. The factor LR_MIN_DEPTH keeps the inequality
    strict whatever the rounding, and a cosine cycle less than a decade deep would be a
    nearly constant learning rate anyway; the paper's bounds (1e-6, 1e-3) lie inside.
    """
    lr_max = trial.suggest_float(lr_max_name, low, high, log=True)
    position = trial.suggest_float("lr_min_position", 0.0, 1.0)
    ceiling = lr_max / LR_MIN_DEPTH
    return {"lr_min": LR_MIN_FLOOR * (ceiling / LR_MIN_FLOOR) ** position, "lr_max": lr_max}


def _margin_sweep(trial: BaseTrial) -> dict[str, Any]:
    return {"margin": trial.suggest_float("margin", *MARGIN_RANGE)}


def _hidden_size(trial: BaseTrial) -> dict[str, Any]:
    return {"hidden_size": trial.suggest_categorical("hidden_size", HIDDEN_SIZES)}


def _rnn_type(trial: BaseTrial) -> dict[str, Any]:
    return {"rnn_type": trial.suggest_categorical("rnn_type", RNN_TYPES)}


def _lr_bounds(trial: BaseTrial) -> dict[str, Any]:
    return _suggest_lr_bounds(trial, "lr_max", *LR_MAX_RANGE)


def _pooling(trial: BaseTrial) -> dict[str, Any]:
    return {"pooling": trial.suggest_categorical("pooling", POOLINGS)}


# The paper's eight models: "<rnn_type>-<n>-<pooling>", the number being n (hidden_size);
# the paper names a model by its embedding size 2n ("GRU 2048" is gru-1024-attention).
_PAPER_MODELS = [(rnn, n, "attention") for rnn in RNN_TYPES for n in HIDDEN_SIZES] + [
    (rnn, 1024, "max") for rnn in RNN_TYPES
]
PAPER_VARIANTS: dict[str, dict[str, Any]] = {
    f"{rnn}-{n}-{pooling}": {"hidden_size": n, "rnn_type": rnn, "pooling": pooling}
    for rnn, n, pooling in _PAPER_MODELS
}


def _paper_grid(trial: BaseTrial) -> dict[str, Any]:
    variant = trial.suggest_categorical("variant", tuple(PAPER_VARIANTS))
    return dict(PAPER_VARIANTS[variant])


def _full(trial: BaseTrial) -> dict[str, Any]:
    reduction = trial.suggest_categorical("reduction", REDUCTIONS)
    # With reduction="mean" the hinge loss, and every gradient, is divided by B^2 (1e3-1.6e4
    # here). Adam cancels most of a constant scale but not all: steps shrink where sqrt(v)
    # nears its eps (1e-8), and the clipping thresholds (absolute norms) act differently, so
    # the best lr_max may move up. "mean" searches a range one decade higher (overlapping
    # "sum" on [1e-4, 1e-2]), under its own name so each branch keeps a fixed distribution.
    low, high = LR_MAX_RANGE_MEAN if reduction == "mean" else LR_MAX_RANGE
    return {
        "margin": trial.suggest_float("margin", *MARGIN_RANGE),
        "hidden_size": trial.suggest_categorical("hidden_size", HIDDEN_SIZES),
        "rnn_type": trial.suggest_categorical("rnn_type", RNN_TYPES),
        "pooling": trial.suggest_categorical("pooling", POOLINGS),
        "batch_size": trial.suggest_categorical("batch_size", BATCH_SIZES),
        "reduction": reduction,
        "negatives": trial.suggest_categorical("negatives", NEGATIVES),
        **_suggest_lr_bounds(trial, f"lr_max_{reduction}", low, high),
    }


_BEST = "everything else at the paper's best"
SPACES: dict[str, SearchSpace] = {
    space.name: space
    for space in (
        SearchSpace("margin_sweep", f"margin from 0.05 to 0.5, {_BEST}", _margin_sweep),
        SearchSpace(
            "hidden_size",
            f"hidden size n in 512, 1024, 2048 (grid), {_BEST}",
            _hidden_size,
            grid={"hidden_size": HIDDEN_SIZES},
        ),
        SearchSpace(
            "rnn_type", f"GRU or LSTM (grid), {_BEST}", _rnn_type, grid={"rnn_type": RNN_TYPES}
        ),
        SearchSpace(
            "lr_bounds",
            f"lr_max 1e-5 to 1e-2, lr_min 1e-7 to lr_max/10 (both log), {_BEST}",
            _lr_bounds,
        ),
        SearchSpace(
            "pooling",
            f"attention or max pooling (grid), {_BEST}",
            _pooling,
            grid={"pooling": POOLINGS},
        ),
        SearchSpace(
            "paper_grid",
            "the paper's 8 models: n 512/1024/2048 x GRU/LSTM with attention, "
            "plus max pooling at n=1024, margin 0.2 (grid)",
            _paper_grid,
            fixed={"margin": 0.2},
            grid={"variant": tuple(PAPER_VARIANTS)},
        ),
        SearchSpace(
            "full",
            "margin, n, RNN, pooling, lr bounds, batch size, reduction and negatives jointly "
            "(lr_max's range depends on the reduction)",
            _full,
        ),
    )
}


def get_space(name: str) -> SearchSpace:
    """The named space; an unknown name raises ValueError listing the valid ones."""
    if name not in SPACES:
        raise ValueError(f"unknown space {name!r}; valid spaces: {', '.join(SPACES)}")
    return SPACES[name]


def list_spaces() -> str:
    """One line per named space: its name, padded, and its description."""
    width = max(map(len, SPACES))
    return "\n".join(f"{name:<{width}}   {space.description}" for name, space in SPACES.items())


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


# -- space files --

_TOP_KEYS = ("name", "description", "fixed", "params")
_PARAM_KEYS = {
    "float": ("type", "low", "high", "log", "step"),
    "int": ("type", "low", "high", "log", "step"),
    "categorical": ("type", "choices"),
}
_FIELD_KINDS: dict[str, type] = {
    name: kind
    for name, kind in typing.get_type_hints(TrainConfig).items()
    if name in TrainConfig.field_names()
}


@dataclass(frozen=True)
class _Param:
    """One searched TrainConfig key of a space file."""

    key: str
    type: str  # "float", "int" or "categorical"
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] = ()

    def suggest(self, trial: BaseTrial) -> Any:
        if self.type == "categorical":
            return trial.suggest_categorical(self.key, self.choices)
        if self.type == "int":
            step = int(self.step or 1)
            return trial.suggest_int(
                self.key, int(self.low), int(self.high), step=step, log=self.log
            )
        return trial.suggest_float(self.key, self.low, self.high, step=self.step, log=self.log)


@dataclass(frozen=True)
class _FileSuggest:
    """A space file's define-by-run function (a class, so that spaces pickle)."""

    params: tuple[_Param, ...]

    def __call__(self, trial: BaseTrial) -> dict[str, Any]:
        return {param.key: param.suggest(trial) for param in self.params}


_FileError = Callable[[str, str], ValueError]  # (key path, problem) -> error naming the file


def load_space_file(path: str | os.PathLike[str]) -> SearchSpace:
    """A space from a YAML or TOML file (see the module docstring); every problem raises
    ValueError naming the file, the key path and what is allowed."""
    path = Path(path)

    def error(where: str, problem: str) -> ValueError:
        return ValueError(f"{path}: {where}: {problem}")

    document = _read_document(path, error)
    unknown = [str(key) for key in document if key not in _TOP_KEYS]
    if unknown:
        raise error(unknown[0], f"unknown key; allowed: {', '.join(_TOP_KEYS)}")
    for required in ("name", "params"):
        if required not in document:
            raise error(required, "missing; a space file needs a name and params")
    name = document["name"]
    if not isinstance(name, str) or not name:
        raise error("name", f"got {name!r}, expected a non-empty string")
    description = document.get("description", f"from {path.name}")
    if not isinstance(description, str):
        raise error("description", f"got {description!r}, expected a string")
    fixed_raw = _mapping(document.get("fixed", {}), "fixed", error)
    params_raw = _mapping(document["params"], "params", error)
    if not params_raw:
        raise error("params", "empty; search at least one TrainConfig key")
    fixed = {str(k): _checked_value(str(k), v, f"fixed.{k}", error) for k, v in fixed_raw.items()}
    params = tuple(_parse_param(str(key), spec, error) for key, spec in params_raw.items())
    for param in params:
        if param.key in fixed:
            raise error(f"params.{param.key}", "also in fixed; a key is either fixed or searched")
    _check_lr_order(fixed, {param.key: param for param in params}, error)
    grid = None
    if all(param.type == "categorical" for param in params):
        grid = {param.key: param.choices for param in params}
    return SearchSpace(name, description, _FileSuggest(params), fixed=fixed, grid=grid)


def _read_document(path: Path, error: _FileError) -> dict[Any, Any]:
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml"):
        raise ValueError(f"{path}: unsupported extension {suffix!r}; expected .yaml, .yml or .toml")
    data = path.read_bytes()
    try:
        document = tomllib.loads(data.decode()) if suffix == ".toml" else yaml.safe_load(data)
    except (yaml.YAMLError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        kind = "TOML" if suffix == ".toml" else "YAML"
        raise ValueError(f"{path}: not valid {kind} (safe parsing): {exc}") from exc
    return _mapping(document, "document", error)


def _mapping(value: Any, where: str, error: _FileError) -> dict[Any, Any]:
    if not isinstance(value, dict):
        shown = "nothing" if value is None else f"{type(value).__name__} {value!r}"
        raise error(where, f"got {shown}, expected a mapping")
    return value


def _checked_value(key: str, value: Any, where: str, error: _FileError) -> Any:
    """``value`` as TrainConfig converts it for ``key``, or a ValueError naming ``where``."""
    if key not in _FIELD_KINDS:
        raise error(where, f"not a TrainConfig field; allowed: {', '.join(_FIELD_KINDS)}")
    # lr_min <= lr_max is TrainConfig's one cross-field rule, checked by _check_lr_order.
    probe = {"lr_min": value, "lr_max": value} if key in ("lr_min", "lr_max") else {key: value}
    try:
        return getattr(TrainConfig.from_dict(probe), key)
    except ValueError as exc:
        raise error(where, f"TrainConfig rejects it: {exc}") from exc


def _parse_param(key: str, spec: Any, error: _FileError) -> _Param:
    where = f"params.{key}"
    kind = _FIELD_KINDS.get(key)
    if kind is None:
        raise error(where, f"not a TrainConfig field; allowed: {', '.join(_FIELD_KINDS)}")
    spec = _mapping(spec, where, error)
    ptype = spec.get("type")
    if not isinstance(ptype, str) or ptype not in _PARAM_KEYS:
        raise error(f"{where}.type", f"got {ptype!r}, expected float, int or categorical")
    unknown = [str(k) for k in spec if k not in _PARAM_KEYS[ptype]]
    if unknown:
        allowed = ", ".join(_PARAM_KEYS[ptype])
        raise error(f"{where}.{unknown[0]}", f"unknown key for type {ptype}; allowed: {allowed}")
    if ptype == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise error(f"{where}.choices", f"got {choices!r}, expected a non-empty list")
        checked = [
            _checked_value(key, c, f"{where}.choices[{i}]", error) for i, c in enumerate(choices)
        ]
        if len(set(checked)) < len(checked):
            raise error(f"{where}.choices", f"got {choices!r}, which repeats a value")
        return _Param(key, ptype, choices=tuple(checked))
    if ptype == "float" and kind is not float:
        raise error(
            f"{where}.type",
            f"float does not fit {key} (type {kind.__name__}); use int or categorical",
        )
    low, high = (_number(spec.get(b), ptype, f"{where}.{b}", error) for b in ("low", "high"))
    if low >= high:
        raise error(f"{where}.low", f"got {low!r}, expected below high ({high!r})")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise error(f"{where}.log", f"got {log!r}, expected true or false")
    if log and low <= 0:
        raise error(f"{where}.low", f"got {low!r}; a log scale needs low > 0")
    step = (
        None if spec.get("step") is None else _number(spec["step"], ptype, f"{where}.step", error)
    )
    if step is not None:
        _check_step(low, high, step, log, f"{where}.step", error)
    for bound in (low, high):
        _checked_value(key, bound, where, error)
    return _Param(key, ptype, low=low, high=high, log=log, step=step)


def _number(value: Any, ptype: str, where: str, error: _FileError) -> float:
    expected = (int,) if ptype == "int" else (int, float)
    if value is None:
        raise error(where, "missing; float and int parameters need low and high")
    if isinstance(value, bool) or not isinstance(value, expected):
        hint = " (YAML reads 1e-4 as a string: write 1.0e-4)" if isinstance(value, str) else ""
        raise error(
            where, f"got {value!r}, expected {'an integer' if ptype == 'int' else 'a number'}{hint}"
        )
    if not math.isfinite(value):
        raise error(where, f"got {value!r}, expected a finite number")
    return value if ptype == "int" else float(value)


def _check_step(
    low: float, high: float, step: float, log: bool, where: str, error: _FileError
) -> None:
    if step <= 0:
        raise error(where, f"got {step!r}, expected a positive step")
    if log:
        raise error(where, "step and log cannot be combined")
    count = (high - low) / step
    if abs(count - round(count)) > 1e-9 * max(1.0, count):
        raise error(where, f"got {step!r}; high - low ({high - low!r}) must be a multiple of it")


def _check_lr_order(
    fixed: Mapping[str, Any], params: Mapping[str, _Param], error: _FileError
) -> None:
    """Every sample must have lr_min <= lr_max: the largest possible lr_min against the
    smallest possible lr_max (searched, fixed or TrainConfig's default)."""
    defaults = TrainConfig()

    def extremes(key: str) -> tuple[float, float]:
        param = params.get(key)
        if param is None:
            value = fixed.get(key, getattr(defaults, key))
            return value, value
        if param.type == "categorical":
            return min(param.choices), max(param.choices)
        return param.low, param.high

    largest_lr_min, smallest_lr_max = extremes("lr_min")[1], extremes("lr_max")[0]
    if largest_lr_min > smallest_lr_max:
        raise error(
            "params",
            f"lr_min can reach {largest_lr_min!r} but lr_max can be as low as "
            f"{smallest_lr_max!r}; every sample needs lr_min <= lr_max",
        )
