"""The named hyperparameter search spaces (docs/protocols.md section 7), one registry.

``get_space(name)`` looks a space up in :data:`SPACES` (an unknown name lists the valid
ones); ``load_space_file(path)`` reads a user's YAML or TOML space (``_space_file``);
``sample_config(space, trial)`` draws one validated config (``_space``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

from optuna.trial import BaseTrial, FixedTrial

from gridsearch._flags import SearchError
from gridsearch._settings import RecordedSettings
from gridsearch._space import SearchSpace, Suggest, sample_config
from gridsearch._space_file import load_space_file
from trainables.config import (
    NEGATIVES,
    POOLINGS,
    REDUCTIONS,
    RNN_TYPES,
    SIZE_FIELDS,
    SMOKE,
    pinned,
)
from trainables.presets import PRESETS, SEED_SYSTEMS

__all__ = [
    "PAPER_VARIANTS",
    "SMOKE_SCALE",
    "SMOKE_SIZES",
    "SMOKE_TRIALS",
    "SPACES",
    "SearchSpace",
    "SmokeSpace",
    "get_space",
    "list_spaces",
    "load_space",
    "load_space_file",
    "sample_config",
    "smoke_size",
    "smoke_space",
]


# -- the named spaces (docs/protocols.md section 7) --

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


# -- the encoder families (README "Encoder families") --

# every family and variant at its preset, the model size left to the run (CPU-sized on a
# CPU, the paper's n otherwise), so the families compare at equal n; each crossed with
# the same three learning rates around the papers' 1e-3: the same budget each
ENCODER_LR_MAX = (5e-4, 1e-3, 2e-3)


def _encoders(trial: BaseTrial) -> dict[str, Any]:
    name = trial.suggest_categorical("family", tuple(PRESETS))
    values = {k: v for k, v in PRESETS[name].items() if k not in SIZE_FIELDS}
    return {**values, "lr_max": trial.suggest_categorical("lr_max", ENCODER_LR_MAX)}


def _seeds_presets(trial: BaseTrial) -> dict[str, Any]:
    """The system's preset exactly, its size and learning rate included even where they
    are TrainConfig's defaults (so a CPU-sized run does not shrink one seed system and
    not another, nor give it the CPU-sized learning rate)."""
    return pinned(PRESETS[trial.suggest_categorical("system", SEED_SYSTEMS)])


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
        SearchSpace(
            "encoders",
            f"each encoder family and variant ({', '.join(PRESETS)}) at its preset, "
            "x lr_max 5e-4/1e-3/2e-3 (grid); n is the run's",
            _encoders,
            grid={"family": tuple(PRESETS), "lr_max": ENCODER_LR_MAX},
        ),
        SearchSpace(
            "seeds_presets",
            "the seed systems exactly as their papers trained them, sizes included "
            f"({', '.join(SEED_SYSTEMS)}; grid)",
            _seeds_presets,
            grid={"system": SEED_SYSTEMS},
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


def load_space(settings: RecordedSettings) -> SearchSpace:
    """The space a search's settings name (``--space`` or ``--space-file``), cut for a
    ``--smoke-test`` (``smoke_space``); a bad one is a ``SearchError`` naming it."""
    try:
        if settings.space_file is not None:
            space = load_space_file(settings.space_file)
        else:
            assert settings.space is not None
            space = get_space(settings.space)
    except ValueError as err:
        raise SearchError(str(err)) from None
    if settings.smoke_test:
        return smoke_space(space, settings.num_samples or SMOKE_TRIALS)
    return space


# -- the smoke test: the same path, tiny, on every space --

SMOKE_TRIALS = 2  # a smoke test's trials, unless --num-samples says otherwise
# The model sizes a smoke test shrinks wherever a space, a preset or a space file sets them
# (seeds_presets trains the seed systems at their papers' n = 1,024): each divided by
# SMOKE_SCALE (the paper's smallest n over the smoke n: 512 / 8), never below the smoke n,
# so that sizes a space tells apart stay apart (hidden_size's grid 512, 1024, 2048 trains
# n = 8, 16, 32: capping all at 8 trained one model three times). The batch size is left
# alone: a larger batch means fewer steps per epoch.
SMOKE_SIZES: dict[str, int] = {  # the smoke n: no smoke size is below it
    "hidden_size": SMOKE["hidden_size"],
    "word_embedding_dim": SMOKE["hidden_size"],
}
SMOKE_SCALE = HIDDEN_SIZES[0] // SMOKE["hidden_size"]


def smoke_size(size: int, smallest: int) -> int:
    """A model size at the smoke test's scale: ``size`` / ``SMOKE_SCALE``, rounded, at
    least ``smallest`` (the smoke n); one already that small is kept."""
    return size if size <= smallest else max(smallest, round(size / SMOKE_SCALE))


@dataclass(frozen=True)
class SmokeSpace(SearchSpace):
    """A space cut for a smoke test (``smoke_space``); ``note`` says how, in one line."""

    note: str = ""


@dataclass(frozen=True)
class _SmallerSuggest:
    """A space's define-by-run function with the model sizes scaled down (a class, so
    that the space pickles into Tune's experiment checkpoints)."""

    suggest: Suggest
    fixed: Mapping[str, Any]

    def __call__(self, trial: BaseTrial) -> dict[str, Any]:
        return _smaller(self.suggest(trial), self.fixed)


def _smaller(values: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with each of ``SMOKE_SIZES`` it sets at the smoke scale (``smoke_size``);
    the word embedding keeps its size where pretrained vectors (``word_vectors``) fix it."""
    scaled = dict(values)
    pretrained = bool({**context, **values}.get("word_vectors"))
    for key, smallest in SMOKE_SIZES.items():
        if key in scaled and not (key == "word_embedding_dim" and pretrained):
            scaled[key] = smoke_size(int(scaled[key]), smallest)
    return scaled


def cut_grid(grid: Mapping[str, Sequence[Any]], trials: int) -> dict[str, tuple[Any, ...]]:
    """At most ``trials`` points of a grid, the same ones every time: the first axis keeps
    its first ``trials`` values (all, if fewer), the next axis its first values within what
    is left (``trials`` // kept so far), and so on; every axis keeps at least its first."""
    cut: dict[str, tuple[Any, ...]] = {}
    room = max(1, trials)
    for key, values in grid.items():
        keep = max(1, min(len(values), room))
        cut[key] = tuple(values[:keep])
        room //= keep
    return cut


def smoke_space(space: SearchSpace, trials: int = SMOKE_TRIALS) -> SmokeSpace:
    """``space`` for a smoke test: a grid cut to its first ``trials`` points
    (``cut_grid``), and every model size it sets at the smoke scale (``smoke_size``);
    the run's own smoke settings (``SMOKE``: n, batch size, epochs; the smoke world)
    apply as for any space."""
    grid = None if space.grid is None else cut_grid(space.grid, trials)
    fixed = _smaller(space.fixed, {})
    note = f"smoke test: {_grid_note(space, grid, trials)}; {_sizes_note(space, grid)}"
    return SmokeSpace(
        space.name,
        f"{space.description} [{note}]",
        _SmallerSuggest(space.suggest, fixed),
        fixed=fixed,
        grid=grid,
        note=note,
    )


def _sizes_note(space: SearchSpace, grid: Mapping[str, Sequence[Any]] | None) -> str:
    """What the smoke test makes of the model sizes the space sets (its fixed ones, and
    those of the grid points it keeps, else of its draws): ``hidden_size 512 -> 8, ...``."""
    sets: list[Mapping[str, Any]] = [space.fixed]
    if grid is not None:
        points = [dict(zip(grid, values, strict=True)) for values in product(*grid.values())]
        sets += [space.suggest(FixedTrial(point)) for point in points]
    else:
        sets += [suggested for _, suggested in space.draws()]
    shown = []
    for key, smallest in SMOKE_SIZES.items():
        sizes = sorted({int(values[key]) for values in sets if key in values})
        if sizes:
            mapped = ", ".join(f"{size} -> {smoke_size(size, smallest)}" for size in sizes)
            shown.append(f"{key} {mapped}")
    if not shown:
        return f"the smoke model (n = {SMOKE['hidden_size']})"
    return f"model sizes / {SMOKE_SCALE}, at least {SMOKE['hidden_size']} ({'; '.join(shown)})"


def _grid_note(space: SearchSpace, grid: Mapping[str, Sequence[Any]] | None, trials: int) -> str:
    full = space.grid_size()
    if grid is None or full is None:
        return f"{trials} trial{'s' if trials != 1 else ''}"
    kept = math.prod(len(values) for values in grid.values())
    if kept == full:
        return f"all {full} grid points"
    axes = "; ".join(f"{k} {', '.join(map(str, v))}" for k, v in grid.items())
    return f"the grid cut to its first {kept} of {full} points ({axes})"
