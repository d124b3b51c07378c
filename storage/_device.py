"""The one device resolver: what a ``--device`` (or a config's ``device``) names, checked
against what this machine has, a CUDA device always with its index.

``torch.device("cuda")`` means "the current CUDA device", which most of torch accepts
but some calls refuse (``torch.cuda.set_per_process_memory_fraction`` needs an index),
and two such objects compare unequal to ``cuda:0`` though they name the same GPU; so a
CUDA device comes back indexed (:func:`with_index`). The callers word the refusal for
their own flag: ``storage.features`` (``--device`` of the store build) and
``trainables.device`` (a run's ``device``, also the benchmarks' ``--device``) map a
:class:`DeviceError`'s ``reason`` onto their messages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

__all__ = ["DeviceError", "resolve", "with_index"]

Reason = Literal["not a device", "no GPU", "past the GPUs"]


class DeviceError(ValueError):
    """A device this machine cannot run on: ``reason`` says why, ``visible`` how many
    CUDA GPUs it sees."""

    def __init__(self, name: str, reason: Reason, visible: int, detail: str = "") -> None:
        super().__init__(f"{name!r}: {reason}{f' ({detail})' if detail else ''}")
        self.name, self.reason, self.visible, self.detail = name, reason, visible, detail


def resolve(name: str | None) -> torch.device:
    """``None`` or ``"auto"``: CUDA when a GPU is visible, else the CPU; ``"cpu"``,
    ``"cuda"`` or ``"cuda:N"`` as asked when this machine has it; anything else, a CUDA
    device without a GPU, or an index past the visible GPUs: :class:`DeviceError`."""
    import torch  # here: reading a store must not need torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if name is None or name == "auto":
        return with_index(torch.device("cuda" if visible else "cpu"))
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as err:  # torch: "Invalid device string"
        raise DeviceError(name, "not a device", visible, str(err)) from None
    if device.type not in ("cpu", "cuda") or (device.type == "cpu" and device.index is not None):
        raise DeviceError(name, "not a device", visible)
    if device.type == "cuda" and not visible:
        raise DeviceError(name, "no GPU", visible)
    if device.type == "cuda" and device.index is not None and device.index >= visible:
        raise DeviceError(name, "past the GPUs", visible)
    return with_index(device)


def with_index(device: torch.device) -> torch.device:
    """``device`` with the current CUDA device's index filled in where it has none
    (``cuda`` -> ``cuda:0`` on a one-GPU machine or inside a Ray trial, which sees
    its own GPU as 0); any other device is returned as it is."""
    if device.type == "cuda" and device.index is None:
        import torch

        return torch.device("cuda", torch.cuda.current_device())
    return device
