"""The private names of Ray and Optuna the search relies on where no public API does the
job exist in the installed versions: an upgrade that renames one fails here, loudly,
instead of making ``--resume`` quietly skip extending a search. Each is listed where it
is used (``gridsearch._extend.RAY_INTERNALS``, ``gridsearch._optuna``,
``gridsearch.cluster.token_auth_enabled``)."""

from __future__ import annotations

import pytest
from ray import tune
from ray.tune.search import SearchGenerator
from ray.tune.search.optuna import OptunaSearch

from gridsearch._extend import RAY_INTERNALS, ExtendedSearch, extend


def _searcher() -> OptunaSearch:
    return OptunaSearch(metric="m", mode="max")


def test_the_ray_internals_resume_relies_on_exist(tmp_path) -> None:
    tuner = tune.Tuner(
        lambda config: None, run_config=tune.RunConfig(storage_path=str(tmp_path), name="x")
    )
    generator = SearchGenerator(_searcher())
    found = {
        "Tuner": tuner,
        "TunerInternal": tuner._local_tuner,
        "SearchGenerator": generator,
    }
    missing = [
        f"{kind}.{name}"
        for kind, names in RAY_INTERNALS.items()
        for name in names
        if not hasattr(found[kind], name)
    ]
    assert missing == []


def test_optunas_searcher_keeps_its_trials_and_study_where_we_read_them() -> None:
    searcher = _searcher()  # gridsearch._optuna's searcher reads both on every suggest
    assert hasattr(searcher, "_ot_trials") and hasattr(searcher, "_ot_study")


def test_token_auth_is_read_where_ray_keeps_it() -> None:
    from ray._private.authentication.authentication_utils import is_token_auth_enabled

    assert isinstance(is_token_auth_enabled(), bool)


def test_a_ray_without_them_is_an_error_not_a_silent_skip() -> None:
    class RenamedTuner:  # a Ray whose Tuner no longer has _local_tuner
        pass

    with pytest.raises(RuntimeError, match="_local_tuner"):
        extend(RenamedTuner(), 10)  # type: ignore[arg-type]
    generator = ExtendedSearch(_searcher(), 10)
    del generator._total_samples
    with pytest.raises(RuntimeError, match="_total_samples"):
        generator.set_state({})
