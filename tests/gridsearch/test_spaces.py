"""The named search spaces and space files: registry, sampling, grids and validation."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from typing import Any

import optuna
import pytest
from optuna.trial import FixedTrial

from gridsearch import spaces
from gridsearch._optuna import DefineByRun
from gridsearch.settings import CPU_SIZED
from gridsearch.spaces import (
    SPACES,
    SearchSpace,
    get_space,
    list_spaces,
    sample_config,
)
from trainables.config import TrainConfig
from trainables.presets import PRESETS, SEED_SYSTEMS, preset

optuna.logging.set_verbosity(optuna.logging.WARNING)

NAMES = ["margin_sweep", "hidden_size", "rnn_type", "lr_bounds", "pooling", "paper_grid", "full"]
FAMILY_SPACES = ["encoders", "seeds_presets"]  # the encoder families (README)

# What each space may produce: (low, high) for numbers, a set for choices
# (docs/protocols.md section 7).
EXPECTED: dict[str, dict[str, Any]] = {
    "margin_sweep": {"margin": (0.05, 0.5)},
    "hidden_size": {"hidden_size": {512, 1024, 2048}},
    "rnn_type": {"rnn_type": {"gru", "lstm"}},
    "lr_bounds": {"lr_max": (1e-5, 1e-2), "lr_min": (1e-7, 1e-3)},
    "pooling": {"pooling": {"attention", "max"}},
    "paper_grid": {
        "margin": {0.2},
        "hidden_size": {512, 1024, 2048},
        "rnn_type": {"gru", "lstm"},
        "pooling": {"attention", "max"},
    },
    "full": {
        "margin": (0.05, 0.5),
        "hidden_size": {512, 1024, 2048},
        "rnn_type": {"gru", "lstm"},
        "pooling": {"attention", "max"},
        "batch_size": {32, 64, 128},
        "reduction": {"sum", "mean"},
        "negatives": {"all", "hardest"},
        "lr_max": (1e-5, 1e-1),
        "lr_min": (1e-7, 1e-2),
    },
}


def _study(sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    return optuna.create_study(sampler=sampler)


def _objective(config: dict[str, Any]) -> float:
    """A deterministic stand-in score, so that TPE has something to model."""
    return sum(float(v) for v in config.values() if isinstance(v, int | float))


def _sample(space: SearchSpace, sampler: optuna.samplers.BaseSampler, n: int) -> list[dict]:
    study = _study(sampler)
    configs = []
    for _ in range(n):
        trial = study.ask()
        config = sample_config(space, trial)
        study.tell(trial, _objective(config))
        configs.append(config)
    return configs


def _check_in_range(name: str, config: dict[str, Any]) -> None:
    TrainConfig.from_dict(config)
    assert set(config) == set(EXPECTED[name])
    for key, allowed in EXPECTED[name].items():
        if isinstance(allowed, set):
            assert config[key] in allowed, (key, config[key])
        else:
            assert allowed[0] <= config[key] <= allowed[1], (key, config[key])


# -- registry --


def test_registry_order_and_lookup() -> None:
    assert list(SPACES) == NAMES + FAMILY_SPACES
    assert all(get_space(name) is SPACES[name] and SPACES[name].name == name for name in NAMES)


def test_list_spaces_has_one_aligned_line_per_space() -> None:
    lines = list_spaces().splitlines()
    assert (
        lines[0] == "margin_sweep    margin from 0.05 to 0.5, everything else at the paper's best"
    )
    assert [line.split()[0] for line in lines] == NAMES + FAMILY_SPACES
    width = max(map(len, SPACES)) + 3  # the longest name, then three spaces
    assert {line.index(SPACES[line.split()[0]].description) for line in lines} == {width}


def test_unknown_space_lists_the_valid_ones() -> None:
    with pytest.raises(
        ValueError, match="unknown space 'x'; valid spaces: margin_sweep, hidden_size"
    ):
        get_space("x")


def test_grid_sizes() -> None:
    sizes = {name: space.grid_size() for name, space in SPACES.items()}
    assert sizes == {
        "margin_sweep": None,
        "hidden_size": 3,
        "rnn_type": 2,
        "lr_bounds": None,
        "pooling": 2,
        "paper_grid": 8,
        "full": None,
        "encoders": 21,
        "seeds_presets": 4,
    }


# -- sampling --


@pytest.mark.parametrize("name", NAMES)
def test_random_samples_validate_and_lie_in_range(name: str) -> None:
    for config in _sample(get_space(name), optuna.samplers.RandomSampler(seed=1), 200):
        _check_in_range(name, config)


@pytest.mark.parametrize("name", NAMES)
def test_tpe_samples_validate_and_lie_in_range(name: str) -> None:
    sampler = optuna.samplers.TPESampler(seed=2, n_startup_trials=5)
    for config in _sample(get_space(name), sampler, 30):
        _check_in_range(name, config)


@pytest.mark.parametrize("name", ["lr_bounds", "full"])
def test_lr_min_is_always_below_lr_max(name: str) -> None:
    configs = _sample(get_space(name), optuna.samplers.RandomSampler(seed=3), 500)
    for config in configs:
        assert 1e-7 <= config["lr_min"] <= config["lr_max"] / 10 < config["lr_max"]
    # lr_min is log-uniform below lr_max/10: both ends of that range are reached.
    ratios = [config["lr_max"] / config["lr_min"] for config in configs]
    assert min(ratios) < 20 and max(ratios) > 1e4


def test_full_shifts_lr_max_up_for_mean_reduction() -> None:
    configs = _sample(get_space("full"), optuna.samplers.RandomSampler(seed=4), 500)
    for config in configs:
        low, high = (1e-4, 1e-1) if config["reduction"] == "mean" else (1e-5, 1e-2)
        assert low <= config["lr_max"] <= high
    assert {config["reduction"] for config in configs} == {"sum", "mean"}
    assert max(c["lr_max"] for c in configs if c["reduction"] == "mean") > 1e-2


def _grid_configs(name: str) -> list[dict[str, Any]]:
    space = get_space(name)
    assert space.grid is not None
    configs: list[dict[str, Any]] = []

    def objective(trial: optuna.Trial) -> float:
        configs.append(sample_config(space, trial))
        return 0.0

    _study(optuna.samplers.GridSampler(space.grid, seed=0)).optimize(objective, n_trials=100)
    return configs


def test_encoders_runs_every_preset_at_the_same_three_learning_rates() -> None:
    configs = _grid_configs("encoders")
    assert len(configs) == 3 * len(PRESETS) == get_space("encoders").grid_size()
    for name, values in PRESETS.items():
        at_preset = [
            c
            for c in configs
            if {k: c[k] for k in c if k != "lr_max"}
            == {k: v for k, v in values.items() if k != "hidden_size"}
        ]
        assert sorted(c["lr_max"] for c in at_preset) == [5e-4, 1e-3, 2e-3], name
    assert not any("hidden_size" in c for c in configs)  # the run's size: equal capacity
    # with a CPU-sized run's settings, every family's trial config is valid: the run's
    # hidden_size reaches the families that have one, and only those
    fixed = {**CPU_SIZED, "seed": 0, "device": "cpu", "threads": 1}
    for name in PRESETS:
        trial = optuna.trial.FixedTrial({"family": name, "lr_max": 1e-3})
        merged = TrainConfig.from_dict(DefineByRun(get_space("encoders"), fixed)(trial))
        assert merged.hidden_size == (32 if merged.encoder != "word_bow" else 1024), name
        assert merged.batch_size == 64 and merged.lr_max == 1e-3


def test_seeds_presets_are_the_papers_systems_exactly() -> None:
    configs = _grid_configs("seeds_presets")
    got = {TrainConfig.from_dict(c) for c in configs}
    assert got == {preset(name) for name in SEED_SYSTEMS}
    assert {c["encoder"] for c in configs} == {"char_rnn", "word_bow", "vete_rnn", "cap2img"}
    # every RNN system states its size, so a CPU-sized run cannot shrink only some
    sizes = {c["encoder"]: c.get("hidden_size") for c in configs}
    assert sizes == {"char_rnn": 1024, "word_bow": None, "vete_rnn": 128, "cap2img": 1024}
    assert {c["lr_max"] for c in configs} == {TrainConfig.lr_max}  # and their rate


@pytest.mark.parametrize(
    ("space", "point", "lr_max"),
    [
        ("margin_sweep", {"margin": 0.2}, CPU_SIZED["lr_max"]),  # the run's n: its rate
        ("rnn_type", {"rnn_type": "lstm"}, CPU_SIZED["lr_max"]),
        ("lr_bounds", {"lr_max": 1e-4, "lr_min_position": 0.5}, 1e-4),  # searched
        ("hidden_size", {"hidden_size": 1024}, TrainConfig.lr_max),  # the paper's n: its rate
        ("paper_grid", {"variant": "gru-2048-attention"}, TrainConfig.lr_max),
        ("seeds_presets", {"system": "word_bow"}, TrainConfig.lr_max),
    ],
)
def test_the_cpu_sized_rate_goes_only_with_the_cpu_sized_n(space, point, lr_max) -> None:
    fixed = {**CPU_SIZED, "seed": 0, "device": "cpu", "threads": 1}
    config = TrainConfig.from_dict(DefineByRun(get_space(space), fixed)(FixedTrial(point)))
    assert config.lr_max == lr_max


@pytest.mark.parametrize("name", ["hidden_size", "rnn_type", "pooling", "paper_grid"])
def test_grid_sampler_visits_every_grid_point(name: str) -> None:
    space = get_space(name)
    assert space.grid is not None
    configs: list[dict[str, Any]] = []

    def objective(trial: optuna.Trial) -> float:
        configs.append(sample_config(space, trial))
        return 0.0

    _study(optuna.samplers.GridSampler(space.grid, seed=0)).optimize(objective, n_trials=20)
    assert len(configs) == space.grid_size()  # the grid sampler stops once it is exhausted
    points = {tuple(sorted(config.items())) for config in configs}
    assert len(points) == space.grid_size()


def test_paper_grid_is_the_papers_eight_models() -> None:
    space = get_space("paper_grid")
    combos = set()
    for variant in space.grid["variant"]:  # type: ignore[index]
        config = sample_config(space, optuna.trial.FixedTrial({"variant": variant}))
        assert config["margin"] == 0.2
        combos.add((config["hidden_size"], config["rnn_type"], config["pooling"]))
    attention = {(n, rnn, "attention") for n in (512, 1024, 2048) for rnn in ("gru", "lstm")}
    assert combos == attention | {(1024, "gru", "max"), (1024, "lstm", "max")}


def test_sample_config_names_the_space_and_the_problem() -> None:
    bad = SearchSpace("bad", "margin below zero", lambda t: {"margin": -1.0})
    with pytest.raises(ValueError, match=r"space 'bad' gave an invalid config: margin: got -1.0"):
        sample_config(bad, optuna.trial.FixedTrial({}))
    clash = SearchSpace("clash", "", lambda t: {"margin": 0.3}, fixed={"margin": 0.2})
    with pytest.raises(ValueError, match=r"space 'clash': key\(s\) both fixed and suggested"):
        sample_config(clash, optuna.trial.FixedTrial({}))
    with pytest.raises(ValueError, match=r"space 'odd': fixed: unknown TrainConfig key\(s\) mrgin"):
        SearchSpace("odd", "", lambda t: {}, fixed={"mrgin": 0.2})


# -- description for logging --


@pytest.mark.parametrize("name", NAMES)
def test_to_dict_is_json_and_lists_the_distributions(name: str) -> None:
    space = get_space(name)
    described = json.loads(json.dumps(space.to_dict()))
    assert described["name"] == name and described["description"] == space.description
    assert described["grid_size"] == space.grid_size()
    assert all(
        param["type"] in ("float", "int", "categorical") for param in described["params"].values()
    )


def test_to_dict_details() -> None:
    full = get_space("full").to_dict()
    assert full["params"]["margin"] == {"type": "float", "low": 0.05, "high": 0.5}
    assert full["params"]["lr_max_mean"] == {"type": "float", "low": 1e-4, "high": 0.1, "log": True}
    assert full["conditional"] == ["lr_max_mean", "lr_max_sum"]
    paper = get_space("paper_grid").to_dict()
    assert paper["fixed"] == {"margin": 0.2}
    assert paper["grid"] == {"variant": list(spaces.PAPER_VARIANTS)}
    assert paper["params"]["variant"]["choices"] == list(spaces.PAPER_VARIANTS)


def test_spaces_pickle() -> None:
    for space in SPACES.values():
        assert pickle.loads(pickle.dumps(space)).to_dict() == space.to_dict()


def test_module_imports_without_ray_or_mlflow() -> None:
    code = (
        "import sys\nsys.modules['ray'] = sys.modules['mlflow'] = None\nimport gridsearch.spaces\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
