"""The machinery of a config's fields: ``ConfigPart``, the base of every config, with the
flat-dict boundary (``from_dict``: numbers given as strings or as the other numeric type
converted, unknown keys refused) and the checks each field declares in its metadata
(``trainables.config.setting``: its kind, its choices, its bounds), run when a config is
built; ``ConfigError``, what they raise. What the fields are, and the rules between
them, is ``trainables.config``'s.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

__all__ = ["INT_LIMIT", "ConfigError", "ConfigPart"]

# every integer field is below 2**63, what a 64-bit signed integer holds: torch keeps
# sizes, steps and seeds in 64-bit integers (torch.manual_seed fails from 2**64 on)
INT_LIMIT = 2**63


class ConfigError(ValueError):
    """An invalid config value; ``field`` names the key (None for an unknown key)."""

    def __init__(self, field: str | None, message: str, *, whole: bool = False) -> None:
        """``message`` says what is wrong; it follows "``field``: " unless ``whole``
        (it names the field itself)."""
        super().__init__(f"{field}: {message}" if field and not whole else message)
        self.field = field
        self.detail = message


_C = TypeVar("_C", bound="ConfigPart")


class ConfigPart:
    """What every config has: its field names, the flat-dict boundary, ``replace``, and
    the checks each field declares (``setting``)."""

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[_C], values: Mapping[str, Any]) -> _C:
        """Build a config from a flat dict, converting numbers given as strings or as the
        other numeric type; unknown keys and invalid values raise ``ConfigError``."""
        names = cls.field_names()
        unknown = sorted(set(values) - set(names))
        if unknown:
            raise ConfigError(
                None,
                f"unknown config key(s) {', '.join(map(repr, unknown))}; allowed: "
                f"{', '.join(names)}",
            )
        kinds = _field_types(cls)[0]
        return cls(**{name: _coerce(name, value, kinds[name]) for name, value in values.items()})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def replace(self: _C, **changes: Any) -> _C:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def __post_init__(self) -> None:
        """Every field's declared checks, then the rules of each part this config is made
        of (its ``_rules``, in the order of the parts: a ``TrainConfig`` runs all five
        parts' and its own, with no list to keep by hand)."""
        self._check_fields()
        for part in reversed(type(self).__mro__):
            rules = part.__dict__.get("_rules")
            if rules is not None:
                rules(self)

    def _check_fields(self) -> None:
        """Each field of its kind and choices, within the bounds it declares."""
        kinds, choices = _field_types(type(self))
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            name, value = field.name, getattr(self, field.name)
            _check_type(name, value, kinds[name])
            if name in choices:
                _check_choice(name, value, choices[name])
            low, high = field.metadata.get("low"), field.metadata.get("high")
            if low is None:
                continue
            if field.metadata["why"] and isinstance(value, int) and value < low:
                raise ConfigError(
                    name, f"got {value!r}, expected at least {low} ({field.metadata['why']})"
                )
            if kinds[name] is int:
                _check_int(
                    name, value, low=int(low), high=INT_LIMIT - 1 if high is None else int(high)
                )
            else:
                _check_float(name, value, low=low, high=high, open_low=field.metadata["open_low"])


def _kind(hint: Any) -> type:
    """The plain type of a field's annotation (a ``Literal``'s: its values')."""
    if typing.get_origin(hint) is Literal:
        return type(typing.get_args(hint)[0])
    return typing.cast(type, hint)


# each config class -> its fields' plain types and the values of its fields of fixed
# choices, read off its annotations once
_FIELD_TYPES: dict[type, tuple[dict[str, type], dict[str, tuple[str, ...]]]] = {}


def _field_types(cls: type) -> tuple[dict[str, type], dict[str, tuple[str, ...]]]:
    """Each field of the config class ``cls`` -> its plain type (``_kind``), and each of
    its fields of fixed choices (a ``Literal``) -> the values it takes."""
    found = _FIELD_TYPES.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        kinds = {name: _kind(hint) for name, hint in hints.items()}
        choices = {
            name: typing.get_args(hint)
            for name, hint in hints.items()
            if typing.get_origin(hint) is Literal
        }
        found = _FIELD_TYPES[cls] = (kinds, choices)
    return found


def _coerce(name: str, value: Any, kind: type) -> Any:
    """``value`` as ``kind`` (int, float or str), accepting numbers written as strings
    (an integer string exactly, however long; "1e3" as 1000)."""
    try:
        if kind is int and not isinstance(value, bool):
            if isinstance(value, numbers.Integral):  # int, numpy's: exactly, however large
                return int(value)
            if isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9_]+\s*", value):
                return int(value)
            if float(value).is_integer():
                return int(float(value))
        if kind is float and not isinstance(value, bool):
            return float(value)
        if kind is str and isinstance(value, str):
            return value
    except (TypeError, ValueError, OverflowError):
        pass
    raise ConfigError(name, f"got {value!r} ({type(value).__name__}), expected {kind.__name__}")


def _check_type(name: str, value: Any, kind: type) -> None:
    """Fields set directly (not through ``from_dict``) must already be of their kind;
    an int is a float too, a bool is neither."""
    accepted = (int, float) if kind is float else (kind,)
    if isinstance(value, bool) or not isinstance(value, accepted):
        raise ConfigError(name, f"got {value!r} ({type(value).__name__}), expected {kind.__name__}")


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(name, f"got {value!r}, expected one of {', '.join(allowed)}")


def _check_int(name: str, value: int, *, low: int, high: int = INT_LIMIT - 1) -> None:
    if not low <= value <= high:
        shown = "2**63 - 1" if high == INT_LIMIT - 1 else str(high)
        raise ConfigError(name, f"got {value!r}, expected an integer from {low} to {shown}")


def _check_float(
    name: str, value: float, *, low: float, high: float | None = None, open_low: bool = False
) -> None:
    bad = (value <= low) if open_low else (value < low)
    if bad or not math.isfinite(value) or (high is not None and value > high):
        relation = ">" if open_low else ">="
        upper = f" and <= {high}" if high is not None else ""
        raise ConfigError(name, f"got {value!r}, expected a finite number {relation} {low}{upper}")
