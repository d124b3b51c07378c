"""Search spaces from YAML or TOML files (``--space-file FILE``), parsed safely.

A space file names TrainConfig keys; ``fixed`` is optional, ``description`` defaults to
the file's name, and a space whose parameters are all categorical gets a grid::

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
string: write ``1.0e-4``. Every problem is a ``ValueError`` naming the file, the key path
and what is allowed.
"""

from __future__ import annotations

import math
import os
import re
import stat
import tomllib
import typing
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from optuna.trial import BaseTrial

from gridsearch._space import SearchSpace
from trainables.config import TrainConfig

__all__ = ["load_space_file"]

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
        return ValueError(f"{path}: {_cut(where, 100)}: {_cut(problem)}")

    document = _read_document(path, error)
    unknown = [str(key) for key in document if key not in _TOP_KEYS]
    if unknown:
        raise error(unknown[0], f"unknown key; allowed: {', '.join(_TOP_KEYS)}")
    for required in ("name", "params"):
        if required not in document:
            raise error(required, "missing; a space file needs a name and params")
    name = document["name"]
    if not isinstance(name, str) or not name:
        raise error("name", f"got {_excerpt(name)}, expected a non-empty string")
    if not SPACE_NAME.fullmatch(name):
        raise error(
            "name",
            f"got {_excerpt(name)}, expected letters, digits, '.', '_' and '-' (at most "
            f"{MAX_NAME}, not starting with '.' or '-'): it names the registered model "
            "grounded-NAME and the search's files",
        )
    description = document.get("description", f"from {path.name}")
    if not isinstance(description, str):
        raise error("description", f"got {description!r}, expected a string")
    fixed_raw = _mapping(document.get("fixed", {}), "fixed", error)
    params_raw = _mapping(document["params"], "params", error)
    if not params_raw:
        raise error("params", "empty; search at least one TrainConfig key")
    fixed = {str(k): _checked_value(str(k), v, f"fixed.{k}", error) for k, v in fixed_raw.items()}
    kind = "TOML" if path.suffix.lower() == ".toml" else "YAML"
    params = tuple(_parse_param(str(key), spec, error, kind) for key, spec in params_raw.items())
    for param in params:
        if param.key in fixed:
            raise error(f"params.{param.key}", "also in fixed; a key is either fixed or searched")
    _check_lr_order(fixed, {param.key: param for param in params}, error)
    grid = None
    if all(param.type == "categorical" for param in params):
        grid = {param.key: param.choices for param in params}
    return SearchSpace(name, description, _FileSuggest(params), fixed=fixed, grid=grid)


MAX_NAME = 100  # with "grounded-", a registered model name of at most 109 characters
# A space's name becomes the registered model's (``registry.model_name``) and a tag.
SPACE_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_NAME - 1}}}")
MAX_BYTES = 64 * 1024  # a space file is a few lines; anything larger is refused unread
MAX_MESSAGE = 300  # characters of a problem an error echoes (values are excerpted)


class _StrictLoader(yaml.SafeLoader):
    """``safe_load`` (no tags that build objects) without aliases, which expand (the
    "billion laughs": a 659-byte file became gigabytes), and without duplicate keys, which
    YAML would resolve silently to the last value."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed in a space file", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {_excerpt(key, 60)}", key_node.start_mark
                )
            seen.add(key if isinstance(key, Hashable) else id(key))
        return super().construct_mapping(node, deep=deep)


def _read_document(path: Path, error: _FileError) -> dict[Any, Any]:
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml"):
        raise ValueError(
            f"{path}: unsupported extension {_excerpt(suffix, 40)}; expected .yaml, .yml or .toml"
        )
    data = _read_capped(path)
    kind = "TOML" if suffix == ".toml" else "YAML"
    try:
        text = data.decode("utf-8")
        document = tomllib.loads(text) if suffix == ".toml" else _load_yaml(text)
    except (yaml.YAMLError, tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"{path}: not valid {kind} (safe parsing): {_one_line(exc)}") from None
    return _mapping(document, "document", error)


def _load_yaml(text: str) -> Any:
    """One YAML document with ``_StrictLoader`` (what ``yaml.safe_load`` does, stricter)."""
    loader = _StrictLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _read_capped(path: Path) -> bytes:
    """The file's bytes: a regular file (never a FIFO, which would block) of at most
    ``MAX_BYTES``; ``ValueError`` naming it otherwise."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise ValueError(f"{path}: {kind}; expected a YAML or TOML space file")
        if info.st_size > MAX_BYTES:
            raise ValueError(
                f"{path}: {info.st_size:,} bytes; a space file is at most {MAX_BYTES:,} bytes"
            )
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as err:
        raise ValueError(f"{path}: cannot be read ({err.strerror or err})") from None
    if len(data) > MAX_BYTES:  # grew after stat
        raise ValueError(f"{path}: more than {MAX_BYTES:,} bytes; a space file is smaller")
    return data


def _one_line(exc: Exception) -> str:
    """A parser's complaint on one line (PyYAML's spans several, with a snippet)."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return _cut(f"{exc.problem} (line {mark.line + 1}, column {mark.column + 1})")
    return _cut(" ".join(str(exc).split()))


def _excerpt(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters."""
    return _cut(repr(value), limit)


def _cut(text: str, limit: int = MAX_MESSAGE) -> str:
    return text if len(text) <= limit else f"{text[: limit - 20]}... ({len(text):,} chars)"


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


def _parse_param(key: str, spec: Any, error: _FileError, kind: str = "YAML") -> _Param:
    where = f"params.{key}"
    field_kind = _FIELD_KINDS.get(key)
    if field_kind is None:
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
    if ptype == "float" and field_kind is not float:
        raise error(
            f"{where}.type",
            f"float does not fit {key} (type {field_kind.__name__}); use int or categorical",
        )
    low, high = (_number(spec.get(b), ptype, f"{where}.{b}", error, kind) for b in ("low", "high"))
    if low >= high:
        raise error(f"{where}.low", f"got {low!r}, expected below high ({high!r})")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise error(f"{where}.log", f"got {log!r}, expected true or false")
    if log and low <= 0:
        raise error(f"{where}.low", f"got {low!r}; a log scale needs low > 0")
    step = spec.get("step")
    if step is not None:
        step = _number(step, ptype, f"{where}.step", error, kind)
        _check_step(low, high, step, log, f"{where}.step", error)
    for bound in (low, high):
        _checked_value(key, bound, where, error)
    return _Param(key, ptype, low=low, high=high, log=log, step=step)


_QUOTED_NUMBER = {
    "YAML": " (YAML reads 1e-4 as a string: write 1.0e-4)",
    "TOML": " (TOML reads a quoted value as a string: write the number without quotes)",
}


def _number(value: Any, ptype: str, where: str, error: _FileError, kind: str = "YAML") -> float:
    expected = (int,) if ptype == "int" else (int, float)
    if value is None:
        raise error(where, "missing; float and int parameters need low and high")
    if isinstance(value, bool) or not isinstance(value, expected):
        hint = _QUOTED_NUMBER[kind] if isinstance(value, str) else ""
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
