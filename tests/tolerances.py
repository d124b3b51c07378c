"""The tolerances of the tests' numerical comparisons, by device and dtype, in one place.

Two results are compared exactly only where the same kernels made both: one device type,
one dtype, the same shapes (so the same reduction order). Everywhere else the bound is
stated here, with why:

- **float32, CPU against CUDA** (``CROSS_DEVICE``): rtol 1e-3, atol 1e-3. The two run
  different kernels: cuDNN's GRU/LSTM against torch's CPU RNN and ``trainables._packed_rnn``,
  cuBLAS matrix products that may round their inputs to TF32 (a 10-bit mantissa, 2**-11 =
  4.9e-4 relative per product) against the CPU's float32 ones. A trained model's unit-length
  embeddings differed by up to 2e-4 between an H200 (torch 2.11, CUDA 13, cuDNN 9.19) and
  the CPU; the bound leaves 5x room, and is still far below what a wrong model, wrong
  weights or a mangled output file would change.
- **float32, one device, another reduction order** (``REORDERED``): rtol 1e-5, atol 1e-5:
  another batch size, chunking or thread count sums the same terms in another order,
  a few float32 ulps (2**-23 = 1.2e-7) per sum.
- **float64**, across devices or orders: rtol 1e-12, atol 1e-12 (2**-52 = 2.2e-16 per
  operation, room for sums of thousands of terms).
- **bfloat16** (autocast, ``precision="bf16"``), against float32 or across devices:
  rtol 1.6e-2 (torch.testing's per-operation bound, four bf16 ulps of 2**-8) and atol
  5e-2 (the recurrence's accumulated error, as ``test_packed_rnn`` measures it).
- **a float64 model trained with a float32 loss, by two code paths** (``FUSED_TRAINING``):
  rtol 1e-5, atol 1e-6, for up to one epoch (60 steps) of training. The ``Trainer``
  computes its loss from float32 casts of the embeddings (``.float()``, for bf16), so a
  float64 run's loss and its gradient w.r.t. the embeddings are float32: the fused trainer
  (``trainables.fused``, batched products) and the lone ``Trainer`` (one product per
  model) round them differently, a float32 ulp (2**-23 = 1.2e-7) per entry, and Adam
  carries that through every step. Everything else of the two paths agrees to the
  float64 bound (``REORDERED``); a member with another margin or seed differs by 1e-2
  and more.

``default_device()`` is what ``device="auto"`` (the default of ``SentenceEncoder``,
``trainables.encode`` and ``TrainConfig``) resolves to on this machine: a test that runs
the default device and compares with a CPU reference passes both to ``assert_close``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = [
    "CROSS_DEVICE",
    "EXACT",
    "FUSED_TRAINING",
    "REORDERED",
    "Tolerance",
    "assert_close",
    "default_device",
    "tolerance",
]


class Tolerance(NamedTuple):
    rtol: float
    atol: float


EXACT = Tolerance(0.0, 0.0)  # the same kernels on the same device: bit for bit
# float32 rows: see the module docstring for each bound's reason
CROSS_DEVICE = {
    torch.float32: Tolerance(rtol=1e-3, atol=1e-3),
    torch.float64: Tolerance(rtol=1e-12, atol=1e-12),
    torch.bfloat16: Tolerance(rtol=1.6e-2, atol=5e-2),
}
REORDERED = {
    torch.float32: Tolerance(rtol=1e-5, atol=1e-5),
    torch.float64: Tolerance(rtol=1e-12, atol=1e-12),
    torch.bfloat16: Tolerance(rtol=1.6e-2, atol=5e-2),
}
FUSED_TRAINING = Tolerance(rtol=1e-8, atol=1e-10)  # float64 training, two code paths (docstring)

Device = str | torch.device
DType = torch.dtype | np.dtype | type | str


def default_device() -> str:
    """The device type ``"auto"`` resolves to here (``trainables.device.resolve_device``):
    ``"cuda"`` with a GPU, else ``"cpu"``; asked without starting CUDA in the process."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def _device_type(device: Device) -> str:
    if device == "auto":
        return default_device()
    return torch.device(device).type


def _torch_dtype(dtype: DType) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    found = getattr(torch, np.dtype(dtype).name, None)
    if not isinstance(found, torch.dtype):
        raise ValueError(f"no tolerance is stated for dtype {dtype!r}")
    return found


def tolerance(
    devices: Sequence[Device] = ("cpu", "cpu"),
    dtype: DType = torch.float32,
    *,
    same_kernels: bool | None = None,
) -> Tolerance:
    """The bound for comparing results computed on ``devices`` (``"auto"`` is resolved) in
    ``dtype`` (the lower precision of the two sides). ``same_kernels`` defaults to whether
    the devices are of one type; pass False for one device but another reduction order
    (batch size, chunks, threads) or another precision (bf16 against float32)."""
    types = {_device_type(device) for device in devices}
    kind = _torch_dtype(dtype)
    if same_kernels is None:
        same_kernels = len(types) == 1
    table = REORDERED if len(types) == 1 else CROSS_DEVICE
    if kind not in table:
        raise ValueError(f"no tolerance is stated for dtype {kind}")
    return EXACT if same_kernels else table[kind]


def _numpy(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return (value.float() if value.dtype == torch.bfloat16 else value).numpy()
    return np.asarray(value)


def assert_close(
    actual: Any,
    expected: Any,
    *,
    devices: Sequence[Device] = ("cpu", "cpu"),
    dtype: DType | None = None,
    same_kernels: bool | None = None,
    err_msg: str = "",
) -> None:
    """``actual`` equals ``expected`` within ``tolerance(devices, dtype, same_kernels)``;
    exactly (``assert_array_equal``) where the same kernels made both. ``dtype`` defaults
    to ``expected``'s."""
    if dtype is None:
        dtype = expected.dtype if isinstance(expected, torch.Tensor) else _numpy(expected).dtype
    bound = tolerance(devices, dtype, same_kernels=same_kernels)
    got, want = _numpy(actual), _numpy(expected)
    if bound == EXACT:
        np.testing.assert_array_equal(got, want, err_msg=err_msg)
    else:
        np.testing.assert_allclose(got, want, rtol=bound.rtol, atol=bound.atol, err_msg=err_msg)
