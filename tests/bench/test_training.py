"""bench_training.py's item 3 (the paper's Flickr8k-sized run), on a small store: the
Trainer gets the semantic evaluation it expects and the CPU estimate is printed."""

from __future__ import annotations

import argparse

import pytest


@pytest.mark.slow
def test_the_flickr8k_estimate_runs_with_the_semantic_evaluation(
    small_store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import _common, bench_training

    args = argparse.Namespace(hidden_size=16, epochs=1, device="cpu", estimate=False, steps=1)
    bench_training.flickr8k(args, _common.load(small_store, None, None), small_store)
    out = capsys.readouterr().out
    assert "semantic evaluation every epoch" in out
    assert "ESTIMATE (not a whole run): 1 timed steps of" in out
