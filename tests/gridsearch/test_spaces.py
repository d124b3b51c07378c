"""The named search spaces and space files: registry, sampling, grids and validation."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import optuna
import pytest

from gridsearch import spaces
from gridsearch.spaces import (
    SPACES,
    SearchSpace,
    get_space,
    list_spaces,
    load_space_file,
    sample_config,
)
from trainables.config import TrainConfig

optuna.logging.set_verbosity(optuna.logging.WARNING)

NAMES = ["margin_sweep", "hidden_size", "rnn_type", "lr_bounds", "pooling", "paper_grid", "full"]

# What each space may produce: (low, high) for numbers, a set for choices (SPEC section 7).
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
    assert list(SPACES) == NAMES
    assert all(get_space(name) is SPACES[name] and SPACES[name].name == name for name in NAMES)


def test_list_spaces_has_one_aligned_line_per_space() -> None:
    lines = list_spaces().splitlines()
    assert lines[0] == "margin_sweep   margin from 0.05 to 0.5, everything else at the paper's best"
    assert [line.split()[0] for line in lines] == NAMES
    assert {line.index(SPACES[line.split()[0]].description) for line in lines} == {15}


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


# -- space files --


def _docstring_example() -> str:
    """The YAML example of the module docstring (every docstring example must run)."""
    lines = (spaces.__doc__ or "").splitlines()
    start = next(i for i, line in enumerate(lines) if line.endswith("::")) + 1
    block = []
    for line in lines[start:]:
        if line and not line.startswith("    "):
            break
        block.append(line)
    return textwrap.dedent("\n".join(block))


TOML_EXAMPLE = """\
name = "my_margins"
description = "margins around the paper's best on small models"
fixed = {hidden_size = 256}
[params]
margin = {type = "float", low = 0.1, high = 0.3}
lr_max = {type = "float", low = 1.0e-4, high = 1.0e-2, log = true}
batch_size = {type = "int", low = 32, high = 128, step = 32}
rnn_type = {type = "categorical", choices = ["gru", "lstm"]}
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_docstring_yaml_and_equivalent_toml_give_the_same_space(tmp_path: Path) -> None:
    from_yaml = load_space_file(_write(tmp_path, "space.yaml", _docstring_example()))
    from_toml = load_space_file(str(_write(tmp_path, "space.toml", TOML_EXAMPLE)))
    assert from_yaml == from_toml
    assert from_yaml.name == "my_margins" and from_yaml.fixed == {"hidden_size": 256}
    assert from_yaml.grid is None and from_yaml.grid_size() is None
    assert from_yaml.to_dict()["params"] == {
        "margin": {"type": "float", "low": 0.1, "high": 0.3},
        "lr_max": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
        "batch_size": {"type": "int", "low": 32, "high": 128, "step": 32},
        "rnn_type": {"type": "categorical", "choices": ["gru", "lstm"]},
    }
    configs = _sample(from_yaml, optuna.samplers.RandomSampler(seed=5), 100)
    assert configs == _sample(from_toml, optuna.samplers.RandomSampler(seed=5), 100)
    for config in configs:
        assert config["hidden_size"] == 256 and 0.1 <= config["margin"] <= 0.3
        assert config["batch_size"] in (32, 64, 96, 128) and config["rnn_type"] in ("gru", "lstm")
    assert pickle.loads(pickle.dumps(from_yaml)) == from_yaml


def test_all_categorical_file_gets_a_grid(tmp_path: Path) -> None:
    text = "name: g\nparams:\n  hidden_size: {type: categorical, choices: [128, 256]}\n"
    text += "  pooling: {type: categorical, choices: [attention, max]}\n"
    space = load_space_file(_write(tmp_path, "g.yml", text))
    assert space.grid == {"hidden_size": (128, 256), "pooling": ("attention", "max")}
    assert space.grid_size() == 4 and space.description == "from g.yml"
    configs: list[dict[str, Any]] = []

    def objective(trial: optuna.Trial) -> float:
        configs.append(sample_config(space, trial))
        return 0.0

    _study(optuna.samplers.GridSampler(space.grid, seed=0)).optimize(objective, n_trials=10)
    assert len({tuple(sorted(config.items())) for config in configs}) == 4


MARGIN = "  margin: {type: float, low: 0.1, high: 0.3}\n"
BAD_FILES: list[tuple[str, str, str, str]] = [
    # (file name, content, the key path the message names, a phrase of the problem)
    ("a.yaml", f"name: a\nparams:\n{MARGIN}extra: 1\n", "extra", "allowed: name, description"),
    ("a.yaml", f"params:\n{MARGIN}", "name", "missing"),
    ("a.yaml", "name: a\n", "params", "missing"),
    ("a.yaml", "name: a\nparams: {}\n", "params", "empty"),
    ("a.yaml", f"name: 3\nparams:\n{MARGIN}", "name", "non-empty string"),
    ("a.yaml", f"name: a\ndescription: [x]\nparams:\n{MARGIN}", "description", "a string"),
    ("a.yaml", "name: a\nparams: [margin]\n", "params", "expected a mapping"),
    ("a.yaml", "name: a\nparams: {margin: 0.2}\n", "params.margin", "expected a mapping"),
    ("a.yaml", f"name: a\nfixed: [1]\nparams:\n{MARGIN}", "fixed", "expected a mapping"),
    ("a.yaml", "- name\n- params\n", "document", "expected a mapping"),
    ("a.yaml", "", "document", "got nothing"),
    (
        "a.yaml",
        "name: a\nparams: {hiden_size: {type: int, low: 1, high: 2}}\n",
        "params.hiden_size",
        "not a TrainConfig field; allowed: hidden_size, rnn_type",
    ),
    ("a.yaml", f"name: a\nfixed: {{foo: 1}}\nparams:\n{MARGIN}", "fixed.foo", "allowed:"),
    (
        "a.yaml",
        "name: a\nparams: {margin: {type: float, low: 0.1, high: 0.3, scale: 2}}\n",
        "params.margin.scale",
        "unknown key for type float; allowed: type, low, high, log, step",
    ),
    (
        "a.yaml",
        "name: a\nparams: {margin: {type: float, choices: [0.1]}}\n",
        "params.margin.choices",
        "unknown key",
    ),
    ("a.yaml", "name: a\nparams: {margin: {type: normal}}\n", "params.margin.type", "'normal'"),
    ("a.yaml", "name: a\nparams: {margin: {low: 0.1}}\n", "params.margin.type", "got None"),
    (
        "a.yaml",
        "name: a\nparams: {margin: {type: float, low: 0.3, high: 0.1}}\n",
        "params.margin.low",
        "expected below high (0.1)",
    ),
    (
        "a.yaml",
        "name: a\nparams: {margin: {type: float, low: 0.2, high: 0.2}}\n",
        "params.margin.low",
        "expected below high",
    ),
    (
        "a.yaml",
        "name: a\nparams: {margin: {type: float, high: 0.2}}\n",
        "params.margin.low",
        "missing",
    ),
    (
        "a.yaml",
        "name: a\nparams: {lr_max: {type: float, low: 1e-4, high: 1.0e-2}}\n",
        "params.lr_max.low",
        "write 1.0e-4",
    ),
    (
        "a.yaml",
        "name: a\nparams: {lr_max: {type: float, low: 0.0, high: 1.0e-2, log: true}}\n",
        "params.lr_max.low",
        "a log scale needs low > 0",
    ),
    (
        "a.yaml",
        "name: a\nparams: {lr_max: {type: float, low: 1.0e-4, high: 1.0e-2, log: yes please}}\n",
        "params.lr_max.log",
        "true or false",
    ),
    (
        "a.yaml",
        "name: a\nparams: {batch_size: {type: int, low: 32, high: 128, step: 0}}\n",
        "params.batch_size.step",
        "positive",
    ),
    (
        "a.yaml",
        "name: a\nparams: {batch_size: {type: int, low: 32, high: 128, step: -32}}\n",
        "params.batch_size.step",
        "positive",
    ),
    (
        "a.yaml",
        "name: a\nparams: {batch_size: {type: int, low: 32, high: 128, step: 40}}\n",
        "params.batch_size.step",
        "multiple",
    ),
    (
        "a.yaml",
        "name: a\nparams: {batch_size: {type: int, low: 32, high: 128, step: 32, log: true}}\n",
        "params.batch_size.step",
        "cannot be combined",
    ),
    (
        "a.yaml",
        "name: a\nparams: {batch_size: {type: int, low: 32.5, high: 128}}\n",
        "params.batch_size.low",
        "an integer",
    ),
    (
        "a.yaml",
        "name: a\nparams: {hidden_size: {type: float, low: 128, high: 512}}\n",
        "params.hidden_size.type",
        "float does not fit hidden_size (type int)",
    ),
    (
        "a.yaml",
        "name: a\nparams: {hidden_size: {type: int, low: 0, high: 512}}\n",
        "params.hidden_size",
        "TrainConfig rejects it: hidden_size: got 0",
    ),
    (
        "a.yaml",
        "name: a\nparams: {rnn_type: {type: categorical, choices: []}}\n",
        "params.rnn_type.choices",
        "non-empty list",
    ),
    (
        "a.yaml",
        "name: a\nparams: {rnn_type: {type: categorical, choices: gru}}\n",
        "params.rnn_type.choices",
        "non-empty list",
    ),
    (
        "a.yaml",
        "name: a\nparams: {rnn_type: {type: categorical, choices: [gru, gru]}}\n",
        "params.rnn_type.choices",
        "repeats",
    ),
    (
        "a.yaml",
        "name: a\nparams: {rnn_type: {type: categorical, choices: [gru, transformer]}}\n",
        "params.rnn_type.choices[1]",
        "expected one of gru, lstm",
    ),
    (
        "a.yaml",
        "name: a\nfixed: {hidden_size: 256}\n"
        "params: {hidden_size: {type: int, low: 128, high: 512}}\n",
        "params.hidden_size",
        "also in fixed",
    ),
    (
        "a.yaml",
        f"name: a\nfixed: {{rnn_type: transformer}}\nparams:\n{MARGIN}",
        "fixed.rnn_type",
        "TrainConfig rejects it: rnn_type: got 'transformer'",
    ),
    (
        "a.yaml",
        f"name: a\nfixed: {{batch_size: 1}}\nparams:\n{MARGIN}",
        "fixed.batch_size",
        "at least 2",
    ),
    (
        "a.yaml",
        "name: a\nparams: {lr_min: {type: float, low: 1.0e-6, high: 1.0e-2, log: true}}\n",
        "params",
        "lr_min can reach 0.01 but lr_max can be as low as 0.001",
    ),
    ("a.yaml", "name: [unclosed\n", "not valid YAML", "expected"),
    ("a.yaml", "name: !!python/object/apply:os.system [echo hi]\n", "not valid YAML", "tag"),
    ("a.toml", "name = \n", "not valid TOML", "line 1"),
    ("a.toml", 'name = "a"\nparams = 3\n', "params", "got int 3, expected a mapping"),
    (
        "a.toml",
        'name = "a"\n[params.margin]\ntype = "float"\nlow = 0.1\nhigh = 0.3\nlog = 1\n',
        "params.margin.log",
        "true or false",
    ),
    ("a.json", "{}", "unsupported extension '.json'", "expected .yaml, .yml or .toml"),
]


@pytest.mark.parametrize(("file_name", "content", "where", "problem"), BAD_FILES)
def test_bad_space_file_names_the_file_and_the_key(
    tmp_path: Path, file_name: str, content: str, where: str, problem: str
) -> None:
    path = _write(tmp_path, file_name, content)
    with pytest.raises(ValueError) as raised:
        load_space_file(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: {where}"), message
    assert problem in message, message


def test_yaml_python_tags_are_refused_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    text = f"name: !!python/object/apply:os.system ['touch {marker}']\nparams: {{}}\n"
    with pytest.raises(ValueError, match="could not determine a constructor"):
        load_space_file(_write(tmp_path, "evil.yaml", text))
    assert not marker.exists()
