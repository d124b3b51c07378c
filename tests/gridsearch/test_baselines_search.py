"""Which searches compare with the store's baselines. What a real search does with them
(computed once per store and cached beside it, held against the best trials in the summary,
recorded in the parent run, read back by the next search, drawn by the report) is read back
from the shared smoke search of tests/gridsearch/test_run.py, which spares a search of its
own."""

from __future__ import annotations

import pytest

from gridsearch.settings import SearchSettings


@pytest.mark.parametrize(
    ("flags", "expected"),
    [([], True), (["--smoke-test"], False), (["--smoke-test", "--baselines"], True),
     (["--no-baselines"], False)],
)  # fmt: skip
def test_baselines_are_on_unless_a_smoke_test_or_turned_off(flags, expected, tmp_path) -> None:
    settings = SearchSettings.from_argv(
        ["--space", "margin_sweep", "--runs-dir", str(tmp_path), *flags]
    )
    assert settings.baselines is expected
