"""The caption and image encoders, the losses, the training loop and the evaluation
suite. Library code: no Ray or MLflow imports here, except in the Tune
trainable wrapper."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainables._packed_rnn import LOOPS, packed_bidirectional
    from trainables._packed_rnn import variant as packed_rnn_variant
    from trainables._packed_rnn_cpp import build_seconds as cpp_loop_build_seconds
    from trainables._packed_rnn_cpp import prebuild as prebuild_cpp_loop
    from trainables.fused import (
        MEMBER_FIELDS,
        SHARED_FIELDS,
        FusedEncoder,
        FusedTrainer,
        check_fusable,
        fuse,
    )

# Imported on first use (``trainables.stats`` and ``trainables.names`` need no torch): the
# packed recurrent layers' two per-step loops and the switch between their variants, for
# the benchmarks that compare them, and
# horizontally fused training of k trials of the same shapes (``trainables.fused``); and the
# build of their C++ loop, once per key, by the processes that may take the time (a
# search's driver, the train CLI; trials and model loads never build it).
_HOME_OF = {
    "LOOPS": "trainables._packed_rnn",
    "packed_bidirectional": "trainables._packed_rnn",
    "packed_rnn_variant": "trainables._packed_rnn",
    "prebuild_cpp_loop": "trainables._packed_rnn_cpp",
    "cpp_loop_build_seconds": "trainables._packed_rnn_cpp",
    **{
        name: "trainables.fused"
        for name in (
            "MEMBER_FIELDS",
            "SHARED_FIELDS",
            "FusedEncoder",
            "FusedTrainer",
            "check_fusable",
            "fuse",
        )
    },
}

_ATTRIBUTE = {  # in its module
    "packed_rnn_variant": "variant",
    "prebuild_cpp_loop": "prebuild",
    "cpp_loop_build_seconds": "build_seconds",
}

__all__ = [
    "LOOPS",
    "MEMBER_FIELDS",
    "SHARED_FIELDS",
    "FusedEncoder",
    "FusedTrainer",
    "check_fusable",
    "cpp_loop_build_seconds",
    "fuse",
    "packed_bidirectional",
    "packed_rnn_variant",
    "prebuild_cpp_loop",
]


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'trainables' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), _ATTRIBUTE.get(name, name))
    globals()[name] = value
    return value
