"""The subpackage's public face: each name it exports comes from the module its lazy
table names, and the table holds exactly the names it exports."""

from __future__ import annotations

import importlib

import pytest

import gridsearch.tracking as tracking


def test_every_exported_name_resolves_from_its_module() -> None:
    assert sorted(tracking.__all__) == sorted(tracking._HOME_OF)
    for name in tracking.__all__:
        home = importlib.import_module(tracking._HOME_OF[name])
        assert getattr(tracking, name) is getattr(home, name), name


def test_a_name_it_does_not_export_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match=r"gridsearch\.tracking.*WriteQueue"):
        _ = tracking.WriteQueue
