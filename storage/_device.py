"""The one rule every device request ends in: a CUDA device always carries its index.

``torch.device("cuda")`` means "the current CUDA device", which most of torch accepts
but some calls refuse (``torch.cuda.set_per_process_memory_fraction`` needs an index),
and two such objects compare unequal to ``cuda:0`` though they name the same GPU. So
every resolver in the project (``storage.features``' ``--device``, ``trainables.device``,
the benchmarks) passes its answer through :func:`with_index`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["with_index"]


def with_index(device: torch.device) -> torch.device:
    """``device`` with the current CUDA device's index filled in where it has none
    (``cuda`` -> ``cuda:0`` on a one-GPU machine or inside a Ray trial, which sees
    its own GPU as 0); any other device is returned as it is."""
    if device.type == "cuda" and device.index is None:
        import torch  # here: reading a store must not need torch

        return torch.device("cuda", torch.cuda.current_device())
    return device
