"""The torch device a run asks for, checked once."""

from __future__ import annotations

import torch

from storage import with_index

__all__ = ["resolve_device"]


def resolve_device(name: str) -> torch.device:
    """``"auto"`` is CUDA when a GPU is visible, else the CPU; ``"cuda"`` or ``"cuda:N"``
    without a GPU, or ``"cuda:N"`` past the visible GPUs, is a ``ValueError`` naming the
    request. A CUDA device always comes back with its index (``"cuda"`` -> ``cuda:0``
    where that is the current device): some torch calls refuse one without."""
    if name == "auto":
        return with_index(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    try:
        device = torch.device(name)
    except RuntimeError:  # torch: "Invalid device string"
        raise ValueError(
            f"device: {name!r} is not a device; expected auto, cpu, cuda or cuda:N"
        ) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: {name!r} requested but no CUDA GPU is available")
    if device.type == "cuda" and device.index is not None:
        visible = torch.cuda.device_count()
        if device.index >= visible:
            raise ValueError(
                f"device: {name!r} requested but only {visible} CUDA GPU(s) are visible "
                f"(cuda:0 to cuda:{visible - 1})"
            )
    return with_index(device)
