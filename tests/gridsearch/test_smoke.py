"""`--smoke-test` is small on every space: at most a few trials (a grid keeps its first
points, the same ones every time), the smoke model sizes even where a space or a preset
sets bigger ones, 2 epochs. The trials each named space would run are drawn here through
the search's own sampler and config builder on a real Optuna study, without Ray."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from gridsearch import make_sampler
from gridsearch._optuna import DefineByRun
from gridsearch.cluster import Resources, fixed_settings
from gridsearch.settings import SMOKE, SearchSettings
from gridsearch.spaces import (
    HIDDEN_SIZES,
    SMOKE_SIZES,
    SMOKE_TRIALS,
    SPACES,
    SmokeSpace,
    cut_grid,
    load_space,
    smoke_size,
    smoke_space,
)
from trainables.config import APPLIES_TO, TrainConfig

CPU = Resources(cpu=1.0, gpu=0.0, concurrent=2)


def _settings(tmp_path: Path, *flags: str) -> SearchSettings:
    return SearchSettings.from_argv(["--smoke-test", "--runs-dir", str(tmp_path), *flags])


def _trials(settings: SearchSettings) -> list[TrainConfig]:
    """The configs a search with ``settings`` trains, drawn as the driver draws them: the
    space's sampler, its define-by-run config over the run-level settings; as many as the
    driver asks for (--num-samples, else the grid's size, else 2 in a smoke test)."""
    space = load_space(settings)
    fixed, _ = fixed_settings(settings, CPU)
    trials = settings.num_samples or space.grid_size() or SMOKE_TRIALS
    sampler, _ = make_sampler(space, settings.seed, False, trials)
    helpers = set(space.helpers())
    configs = []

    def objective(trial: optuna.Trial) -> float:
        config: dict[str, Any] = DefineByRun(space, fixed)(trial)
        configs.append(TrainConfig.from_dict({k: v for k, v in config.items() if k not in helpers}))
        return 0.0

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.create_study(sampler=sampler).optimize(objective, n_trials=trials)
    return configs


@pytest.mark.parametrize("name", list(SPACES))
def test_every_named_space_is_small_in_a_smoke_test(name: str, tmp_path: Path) -> None:
    settings = _settings(tmp_path, "--space", name)
    space = load_space(settings)
    assert isinstance(space, SmokeSpace) and space.note.startswith("smoke test: ")
    configs = _trials(settings)
    assert 1 <= len(configs) <= SMOKE_TRIALS
    for config in configs:
        assert config.epochs == SMOKE["epochs"] == 2
        for key, size in SMOKE_SIZES.items():
            if config.encoder in APPLIES_TO.get(key, (config.encoder,)):
                assert getattr(config, key) <= smoke_size(max(HIDDEN_SIZES), size) == 32
                assert getattr(config, key) >= size, (name, key, config)
        if "batch_size" not in SPACES[name].searched_keys():
            assert config.batch_size == SMOKE["batch_size"]


@pytest.mark.parametrize("name", list(SPACES))
def test_a_smoke_test_never_trains_one_config_twice(name: str, tmp_path: Path) -> None:
    """Sizes a space tells apart stay apart (hidden_size's grid once trained n = 8 twice:
    512 and 1024 were both capped at 8)."""
    configs = _trials(_settings(tmp_path, "--space", name))
    assert len({repr(c) for c in configs}) == len(configs), configs


def test_a_grid_of_sizes_keeps_its_sizes_apart_and_says_which(tmp_path: Path) -> None:
    for name in ("hidden_size", "paper_grid"):
        settings = _settings(tmp_path, "--space", name)
        assert sorted(c.hidden_size for c in _trials(settings)) == [8, 16]
        note = load_space(settings).note  # type: ignore[attr-defined]
        assert note.endswith("model sizes / 64, at least 8 (hidden_size 512 -> 8, 1024 -> 16)")
    paper = load_space(_settings(tmp_path, "--space", "paper_grid"))
    assert "variant gru-512-attention, gru-1024-attention" in paper.note  # type: ignore[attr-defined]
    assert load_space(_settings(tmp_path, "--space", "margin_sweep")).note.endswith(  # type: ignore[attr-defined]
        "the smoke model (n = 8)"
    )


def test_smoke_sizes_keep_their_order_and_the_smoke_n() -> None:
    assert [smoke_size(n, 8) for n in (4, 8, 16, 300, 512, 1024, 2048)] == [4, 8, 8, 8, 8, 16, 32]


def test_seeds_presets_keeps_its_first_two_systems_at_the_smoke_scale(tmp_path: Path) -> None:
    """The space that kept n = 1024 and ran 14.5 minutes: now its first two seed systems,
    the character model at n = 16 (1024 / 64) and the bag of words with 8-d word
    embeddings (128 / 64, at least 8)."""
    configs = _trials(_settings(tmp_path, "--space", "seeds_presets"))
    assert [c.encoder for c in sorted(configs, key=lambda c: c.encoder)] == [
        "char_rnn",
        "word_bow",
    ]
    char, bow = sorted(configs, key=lambda c: c.encoder)
    assert char.hidden_size == 16 and bow.word_embedding_dim == 8
    assert char.lr_max == TrainConfig.lr_max  # the rest of the preset as its paper had it
    assert bow.loss == "pearson" and bow.bow_pooling == "mean"


def test_a_grid_keeps_its_first_points_and_says_so(tmp_path: Path) -> None:
    space = load_space(_settings(tmp_path, "--space", "encoders"))
    assert space.grid == {"family": ("char_rnn", "word_rnn"), "lr_max": (5e-4,)}
    assert isinstance(space, SmokeSpace)
    cut = "the grid cut to its first 2 of 21 points (family char_rnn, word_rnn; lr_max 0.0005)"
    assert cut in space.note
    assert space.note in space.description  # the parent run's space.json says so too
    # --num-samples N keeps the first N points where the axes allow: every family, 21
    every = load_space(_settings(tmp_path, "--space", "encoders", "--num-samples", "21"))
    assert every.grid_size() == 21 and "all 21 grid points" in every.note  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("trials", "expected"),
    [
        (1, {"a": (1,), "b": ("x",)}),
        (2, {"a": (1, 2), "b": ("x",)}),
        (4, {"a": (1, 2, 3), "b": ("x",)}),
        (6, {"a": (1, 2, 3), "b": ("x", "y")}),
        (100, {"a": (1, 2, 3), "b": ("x", "y")}),
    ],
)
def test_cut_grid_keeps_a_prefix_of_each_axis(trials: int, expected: dict) -> None:
    assert cut_grid({"a": (1, 2, 3), "b": ("x", "y")}, trials) == expected


def test_a_space_file_is_cut_too(tmp_path: Path) -> None:
    """A space file's fixed sizes are capped, its own batch size kept (fewer steps)."""
    path = tmp_path / "space.yaml"
    path.write_text(
        "name: wide\nfixed: {hidden_size: 512, batch_size: 32}\n"
        "params:\n  rnn_type: {type: categorical, choices: [gru, lstm]}\n"
        "  pooling: {type: categorical, choices: [attention, max]}\n"
    )
    settings = _settings(tmp_path, "--space-file", str(path))
    configs = _trials(settings)
    assert len(configs) == 2
    assert {(c.rnn_type, c.pooling) for c in configs} == {
        ("gru", "attention"),
        ("lstm", "attention"),
    }
    assert all(c.hidden_size == 8 and c.batch_size == 32 for c in configs)


def test_without_smoke_test_the_space_is_untouched(tmp_path: Path) -> None:
    settings = SearchSettings.from_argv(["--space", "encoders", "--runs-dir", str(tmp_path)])
    assert load_space(settings) is SPACES["encoders"]
    assert smoke_space(SPACES["margin_sweep"]).grid is None
