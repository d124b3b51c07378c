"""tests.tolerances: the stated bounds by device and dtype, and exactness where the same
kernels run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.tolerances import (
    CROSS_DEVICE,
    EXACT,
    REORDERED,
    assert_close,
    default_device,
    tolerance,
)
from trainables.device import resolve_device


def test_the_same_kernels_are_exact_and_other_devices_or_orders_are_bounded() -> None:
    assert tolerance(("cpu", "cpu")) == EXACT
    assert tolerance(("cuda:0", "cuda")) == EXACT  # one device type, same shapes
    assert tolerance(("cuda:0", "cpu")) == CROSS_DEVICE[torch.float32] == (1e-3, 1e-3)
    assert tolerance(("cpu", "cpu"), np.float32, same_kernels=False) == REORDERED[torch.float32]
    assert tolerance(("cuda", "cpu"), "float64") == (1e-12, 1e-12)
    assert tolerance(("cuda", "cpu"), torch.bfloat16).rtol > CROSS_DEVICE[torch.float32].rtol
    assert default_device() == resolve_device("auto").type
    auto = tolerance(("auto", "cpu"))
    assert auto == (EXACT if default_device() == "cpu" else CROSS_DEVICE[torch.float32])
    with pytest.raises(ValueError, match="no tolerance is stated for dtype"):
        tolerance(("cpu", "cuda"), np.int64)


def test_assert_close_reads_the_dtype_and_applies_the_bound() -> None:
    expected = np.linspace(-1, 1, 12, dtype=np.float32)
    off = expected + np.float32(2e-4)  # as an H200's embeddings differ from the CPU's
    assert_close(off, expected, devices=("cuda", "cpu"))
    assert_close(torch.from_numpy(off), torch.from_numpy(expected), devices=("cuda", "cpu"))
    with pytest.raises(AssertionError):
        assert_close(off, expected)  # both on the CPU: exact
    with pytest.raises(AssertionError):
        assert_close(expected + np.float32(0.01), expected, devices=("cuda", "cpu"))
    assert_close(expected.astype(np.float64) + 1e-13, expected.astype(np.float64),
                 devices=("cuda", "cpu"))  # fmt: skip
