"""Search spaces from YAML and TOML files: the docstring's example, grids, and every
problem named by file and key."""

from __future__ import annotations

import pickle
import textwrap
from pathlib import Path
from typing import Any

import optuna
import pytest

from gridsearch import _space_file
from gridsearch.spaces import load_space_file, sample_config
from tests.gridsearch.test_spaces import _sample, _study

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _docstring_example() -> str:
    """The YAML example of the module docstring (every docstring example must run)."""
    lines = (_space_file.__doc__ or "").splitlines()
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
