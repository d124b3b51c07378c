"""Where the GPU test group (``pytest -m gpu``) runs, shared by its modules
(``tests/trainables/test_gpu.py``, ``tests/storage/test_gpu.py``).

On a machine with a CUDA GPU the group runs on ``cuda:0``; without one it is skipped.
``GROUNDED_GPU_TESTS_DEVICE=cpu`` runs the same tests on the CPU instead, a dry run
that exercises the test code itself where there is no GPU (the assertions that only
mean something on a GPU, such as an indexed CUDA device or a memory cap, are left
out then). Nothing here or in the group imports Ray, MLflow or Optuna: the GPU
machine need not have them.
"""

from __future__ import annotations

import os

import pytest
import torch

__all__ = ["DEVICE_NAME", "DRY_RUN", "ENV", "ON_GPU", "group_device", "pytestmark"]

ENV = "GROUNDED_GPU_TESTS_DEVICE"
_MODE = os.environ.get(ENV, "")
if _MODE not in ("", "cuda", "cpu"):
    raise RuntimeError(
        f"{ENV}={_MODE!r}: expected cpu (a dry run on the CPU) or cuda (the default: "
        "the GPU, the group skipped without one)"
    )
DRY_RUN = _MODE == "cpu"
ON_GPU = not DRY_RUN
# the device string a user types: "cuda" without an index (or "cpu" in a dry run)
DEVICE_NAME = "cpu" if DRY_RUN else "cuda"

# every test of the group: marked gpu, skipped without a GPU unless it is a dry run
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        ON_GPU and not torch.cuda.is_available(),
        reason=f"needs a CUDA GPU ({ENV}=cpu runs the group on the CPU as a dry run)",
    ),
]


def group_device() -> torch.device:
    """The device the group runs on: ``cuda:0``, or the CPU in a dry run."""
    return torch.device("cpu") if DRY_RUN else torch.device("cuda:0")
