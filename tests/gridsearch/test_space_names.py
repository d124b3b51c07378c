"""A space file's ``name`` names the registered model and the search's records: one that
cannot (NUL, '../', '/', too long) is refused when the file is read, before Ray starts;
a TOML file's quoted number gets TOML's hint, not YAML's."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridsearch._space_file import MAX_NAME, load_space_file
from gridsearch.registry import model_name
from gridsearch.run import main

MARGIN = "params:\n  margin: {type: float, low: 0.1, high: 0.3}\n"
BAD_NAMES = {
    "NUL": "a\x00b",
    "parent": "../x",
    "slash": "a/b",
    "colon": "a:b",
    "leading dot": ".hidden",
    "space": "a b",
    "too long": "a" * (MAX_NAME + 1),
}


@pytest.mark.parametrize("which", list(BAD_NAMES))
def test_a_name_that_cannot_name_a_model_is_refused_at_the_start(
    tmp_path: Path, which: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name = BAD_NAMES[which]
    path = tmp_path / "space.yaml"
    escaped = name.replace("\x00", "\\0")
    path.write_text(f'name: "{escaped}"\n{MARGIN}')
    with pytest.raises(ValueError, match=r"space.yaml: name: got .* registered model"):
        load_space_file(path)
    with pytest.raises(ValueError):
        model_name(name)
    runs = tmp_path / "runs"
    code = main(["--space-file", str(path), "--runs-dir", str(runs), "--smoke-test"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"error: {path}: name: "), err
    assert "\x00" not in err[0] and not (runs / "searches").exists()


def test_a_long_name_within_the_bound_is_taken(tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(f"name: {'a' * MAX_NAME}\n{MARGIN}")
    assert load_space_file(path).name == "a" * MAX_NAME
    assert model_name("a" * MAX_NAME) == f"grounded-{'a' * MAX_NAME}"


@pytest.mark.parametrize(
    ("suffix", "text", "hint"),
    [
        (".toml", 'name = "t"\n[params.margin]\ntype = "float"\nlow = "0.1"\nhigh = 0.3\n',
         "TOML reads a quoted value as a string"),
        (".yaml", "name: t\nparams:\n  margin: {type: float, low: 1e-4, high: 0.3}\n",
         "YAML reads 1e-4 as a string"),
    ],
)  # fmt: skip
def test_a_quoted_number_gets_its_format_s_hint(
    tmp_path: Path, suffix: str, text: str, hint: str
) -> None:
    path = tmp_path / f"space{suffix}"
    path.write_text(text)
    with pytest.raises(ValueError) as caught:
        load_space_file(path)
    assert hint in str(caught.value) and ("YAML" in hint) == ("YAML" in str(caught.value))
