"""The torch device a run asks for, checked once (``storage``'s one device resolver,
worded for a run's ``device``), the process set up as a trainer's config says, and the
autocast of a run's ``precision``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from storage import DeviceError, resolve
from trainables import _packed_rnn_cpp

if TYPE_CHECKING:
    from trainables.config import TrainConfig

__all__ = ["autocast", "resolve_device", "set_up_training"]


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


def set_up_training(config: TrainConfig, train_images: int) -> torch.device:
    """The device of a trainer of ``config`` (the lone and the fused one alike), with this
    process's torch threads and recurrence set as the config says; a ``ValueError`` when a
    batch needs more images than the training split's ``train_images``."""
    device = resolve_device(config.device)
    if config.threads:
        torch.set_num_threads(config.threads)
    _packed_rnn_cpp.use(config.recurrence)
    if train_images < config.batch_size:
        raise ValueError(
            f"batch_size: got {config.batch_size}, but the training split has "
            f"only {train_images} images"
        )
    return device


def autocast(device: torch.device, precision: str) -> torch.autocast:
    """bfloat16 autocast on ``device`` where ``precision`` is "bf16", else none."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
