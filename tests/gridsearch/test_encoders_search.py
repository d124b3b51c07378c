"""A real search over the `encoders` space (every encoder family and variant) on a real
local Ray, MLflow sqlite store and the smoke world: each family trains, is recorded and
can be used from its trial's ensemble file through the same paths as the paper's."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from gridsearch.run import main
from trainables import names
from trainables.config import TrainConfig
from trainables.encoder import SentenceEncoder
from trainables.presets import PRESETS

SENTENCES = ["A small red circle.", "two blue squares left of a green star"]


def _family(params: dict[str, str]) -> str:
    """The PRESETS name whose settings a trial's params hold (n aside: the run's)."""
    matches = [
        name
        for name, values in PRESETS.items()
        if all(params[k] == str(v) for k, v in values.items() if k != "hidden_size")
        and params["attention_heads"] == str(values.get("attention_heads", 1))
        and params["pairing"] == values.get("pairing", "image")
    ]
    assert len(matches) == 1, (params, matches)
    return matches[0]


@pytest.mark.slow
def test_an_encoders_search_trains_every_family_through_the_same_paths(
    tmp_path: Path, mlflow_runs, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--space", "encoders", "--smoke-test", "--no-dashboard", "--scheduler", "fifo",
            "--epochs", "1", "--runs-dir", str(tmp_path), "--experiment", "families"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    grid = 3 * len(PRESETS)
    assert f"{grid} trials: {grid} finished" in out
    assert "registered models:/grounded-encoders@best-retrieval" in out
    client, runs = mlflow_runs(tmp_path, "families")
    trials = [r for r in runs if r.data.tags.get("search.role") == "trial"]
    assert Counter(_family(r.data.params) for r in trials) == {name: 3 for name in PRESETS}
    for run in trials:
        params = run.data.params
        config = TrainConfig.from_dict({k: params[k] for k in TrainConfig.field_names()})
        # the smoke run's n reaches the families that have one, and only those
        assert config.hidden_size == (1024 if config.encoder == "word_bow" else 8)
        assert run.data.tags["outcome"] == "finished"
        assert names.PRIMARY_RETRIEVAL in run.data.metrics
        folder = client.download_artifacts(run.info.run_id, "ensemble.pt", str(tmp_path))
        encoder = SentenceEncoder.load(folder, device="cpu")
        assert encoder.config == config
        vectors = encoder.encode(SENTENCES)
        assert vectors.shape == (2, config.embedding_dim)
