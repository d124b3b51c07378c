"""The torch device a run asks for, checked once (``storage``'s one device resolver,
worded for a run's ``device``)."""

from __future__ import annotations

import torch

from storage import DeviceError, resolve

__all__ = ["resolve_device"]


def resolve_device(name: str) -> torch.device:
    """``"auto"`` is CUDA when a GPU is visible, else the CPU; ``"cuda"`` or ``"cuda:N"``
    without a GPU, or ``"cuda:N"`` past the visible GPUs, is a ``ValueError`` naming the
    request. A CUDA device always comes back with its index (``"cuda"`` -> ``cuda:0``
    where that is the current device): some torch calls refuse one without."""
    try:
        return resolve(name)
    except DeviceError as err:
        if err.reason == "not a device":
            raise ValueError(
                f"device: {name!r} is not a device; expected auto, cpu, cuda or cuda:N"
            ) from None
        if err.reason == "no GPU":
            raise ValueError(f"device: {name!r} requested but no CUDA GPU is available") from None
        raise ValueError(
            f"device: {name!r} requested but only {err.visible} CUDA GPU(s) are visible "
            f"(cuda:0 to cuda:{err.visible - 1})"
        ) from None
