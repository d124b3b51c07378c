"""Fixtures of the trainables tests that compare code paths in float64."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from trainables.data import EncodedSplit, TrainingData


@pytest.fixture
def float64() -> Iterator[None]:
    """Models built in float64 (the Trainer builds in torch's default dtype)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def _f64(split: EncodedSplit) -> EncodedSplit:
    return dataclasses.replace(split, features=split.features.astype(np.float64))


@pytest.fixture(scope="module")
def float64_data(tiny_world: Path) -> TrainingData:
    """The tiny world with float64 image features (96 training images: 60 steps an epoch
    at batch 8; captions of 22 to over 100 characters)."""
    loaded = TrainingData.from_store(str(tiny_world))
    return dataclasses.replace(
        loaded, train=_f64(loaded.train), val=_f64(loaded.val), test=_f64(loaded.test)
    )
