"""The matrix products of the packed recurrence (``trainables._packed_rnn``) with its
recurrent weights ``w_hh``: in the weights' dtype by ATen's ``mm``, in bfloat16 under CPU
autocast (float32 accumulation, the results added to float32 state), or, for float32
states large enough, in oneDNN on weights laid out for it once per pass.
"""

from __future__ import annotations

import platform

import torch

__all__ = ["ONEDNN_FROM", "Products", "onednn"]


class Products:
    """The recurrence's matrix products with ``w_hh``: in its own dtype, or in ``low``
    (bfloat16: the CPU's bf16 dot products, float32 accumulation; the results are
    rounded to ``low`` and added to float32 state). float32 products of a large enough
    state (``onednn(w_hh, low)``) run in oneDNN, on weights laid out for it once per
    pass (``step_weight``, ``back_weight``), instead of ATen's ``mm``."""

    def __init__(self, w_hh: torch.Tensor, low: torch.dtype | None) -> None:
        self.low = low
        self.w = w_hh if low is None else w_hh.to(low)
        self.dnn = onednn(w_hh, low)
        self._packed: dict[str, torch.Tensor] = {}

    @property
    def step_weight(self) -> torch.Tensor:
        """What a forward step multiplies by: ``w`` (as ``h @ w.T``), or ``w_hh`` laid
        out for oneDNN."""
        return self._laid_out("step")

    @property
    def back_weight(self) -> torch.Tensor:
        """What a backward step multiplies by: ``w`` (as ``d @ w``), or ``w_hh.T`` laid
        out for oneDNN."""
        return self._laid_out("back")

    def _laid_out(self, use: str) -> torch.Tensor:
        if not self.dnn:
            return self.w
        if use not in self._packed:  # once per pass: the weights change every step
            w = self.w.detach()
            self._packed[use] = _reorder(w if use == "step" else w.t().contiguous())
        return self._packed[use]

    def step(self, bias: torch.Tensor, h: torch.Tensor, out: torch.Tensor) -> None:
        """``out = bias + h @ w_hh.T`` (a forward step)."""
        if self.dnn:
            torch.add(_onednn_linear(h, self.step_weight), bias, out=out)
        elif self.low is None:
            torch.addmm(bias, h, self.w.t(), out=out)
        else:
            torch.add(torch.mm(h.to(self.low), self.w.t()), bias, out=out)

    def back(self, d: torch.Tensor, out: torch.Tensor, add: torch.Tensor | None = None) -> None:
        """``out = add + d @ w_hh`` (a backward step; ``add`` None: 0)."""
        if self.dnn:
            product = _onednn_linear(d, self.back_weight)
            if add is None:
                out.copy_(product)
            else:
                torch.add(product, add, out=out)
        elif self.low is None:
            if add is None:
                torch.mm(d, self.w, out=out)
            else:
                torch.addmm(add, d, self.w, out=out)
        elif add is None:
            out.copy_(torch.mm(d.to(self.low), self.w))
        else:
            torch.add(torch.mm(d.to(self.low), self.w), add, out=out)

    def weight_grad(self, d_all: torch.Tensor, h_all: torch.Tensor) -> torch.Tensor:
        """``d_all.T @ h_all``: the gradient of ``w_hh`` over every step at once."""
        if self.low is None:
            return d_all.t() @ h_all
        return (d_all.t().to(self.low) @ h_all.to(self.low)).to(d_all.dtype)


_X86 = platform.machine().lower() in ("x86_64", "amd64")
# the state size from which float32 recurrent products run in oneDNN rather than ATen's
# mm (MKL): per step, one thread, (B x n) @ (n x 3n), oneDNN was faster from n=512, even
# at n=256 and slower below (BENCHMARKS.md, "Training at the CPU's limit"); None: never
ONEDNN_FROM: int | None = 512


def onednn(w_hh: torch.Tensor, low: torch.dtype | None) -> bool:
    """Whether the products with ``w_hh`` run in oneDNN: float32 on an x86 CPU (where it
    was measured), no ``low``, n at least ``ONEDNN_FROM``, torch built with oneDNN."""
    return (
        ONEDNN_FROM is not None
        and _X86
        and low is None
        and w_hh.dtype == torch.float32
        and w_hh.device.type == "cpu"
        and w_hh.shape[1] >= ONEDNN_FROM
        and torch.backends.mkldnn.is_available()
    )


def _reorder(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` (out, in) laid out for oneDNN's linear."""
    return torch.ops.mkldnn._reorder_linear_weight(weight)


def _onednn_linear(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` by oneDNN, ``packed`` = ``_reorder(weight)``."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
