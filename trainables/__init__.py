"""The caption and image encoders, the losses, the training loop and the evaluation
suite. Library code: no Ray or MLflow imports here, except in the Tune
trainable wrapper."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainables._packed_rnn import LOOPS, packed_bidirectional

# The packed recurrent layers' two per-step loops, for the benchmarks that compare them;
# imported on first use (``trainables.stats`` and ``trainables.names`` need no torch).
_HOME_OF = {"LOOPS": "trainables._packed_rnn", "packed_bidirectional": "trainables._packed_rnn"}

__all__ = ["LOOPS", "packed_bidirectional"]


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'trainables' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
