"""The CPU training bench's bookkeeping: the FLOPs it counts, the batches it hands the
authors' loop, and its flags. (The authors' code itself is not in the repository, so
the loop's timing runs only where ``--authors-repo`` points at a copy.)"""

from __future__ import annotations

import string

import numpy as np
import pytest

from bench import _authors
from bench import bench_cpu_training as bench
from bench._cli import BadInput
from trainables.data import EncodedSplit


def test_flops_count_the_recurrence_attention_and_image_encoder() -> None:
    n, length = 1024, 61.0
    rnn = 2 * (2 * 3 * n * (20 + n))  # two directions, three gates, per character
    attention = 2 * 2 * (2 * n) * 128
    image = 2 * 2048 * 2 * n
    assert bench.flops_per_caption(n, length) == 3 * ((rnn + attention) * length + image)
    # the paper model's cost (n=1024): 2.58 GFLOP per caption at ~61 characters
    assert bench.flops_per_caption(n, length) / 1e9 == pytest.approx(2.58, rel=0.01)


def test_the_authors_batches_hold_their_character_indices_and_our_features() -> None:
    captions = np.array(["A dog.", "Two red 0s", "x", "Zebra!", "ok"] * 2, dtype=object)
    split = EncodedSplit(
        np.arange(2 * 2048, dtype=np.float32).reshape(2, 2048),
        np.zeros((10, 12), dtype=np.int64),
        np.array([len(c) for c in captions]),
        captions,
        np.array(["a", "b"]),
    )
    [(features, chars, lengths)] = _authors.authors_batches(split, np.array([[1, 6]]))
    assert lengths == [10, 10] and chars.shape == (2, 10)
    assert features.dtype == np.float64 and (features == split.features[[0, 1]]).all()
    assert list(chars[0]) == [string.printable.find(c) + 1 for c in "Two red 0s"]
    assert chars[0][8] == 1  # their '0' is index 1 (printable's 0 + 1), as their code does
    assert _authors._authors_index("a\u00e9") == [string.printable.find("a") + 1, -1]


@pytest.mark.parametrize("bad", ["", "256", "256:1", "a:32", "256:32,", "1024:32:1"])
def test_bad_sizes_are_one_error_line(bad: str) -> None:
    with pytest.raises(BadInput, match="error: --sizes"):
        bench._sizes(bad)
