"""Bidirectional GRU and LSTM layers over a packed batch, with hand-written backwards,
for training on the CPU.

``nn.GRU`` and ``nn.LSTM`` on the CPU run a packed sequence as autograd-recorded steps:
each step's backward zero-fills and adds a gradient the size of the *whole* packed input
projection ``(sum of lengths, 3n or 4n)``, and adds a ``3n x n`` (``4n x n``) weight
gradient. With n=1024 that memory traffic took more time than the matrix products (the
torch profiler: ``aten::fill_``/``aten::add_`` ahead of ``aten::mm``; see BENCHMARKS.md).
Here the input projections of all steps are one matrix product before the recurrence,
the recurrence keeps what its backward needs, and the backward computes the recurrent
weights' gradients as one matrix product over all steps. The two directions are
independent until their outputs meet, so with 2 threads or more they run side by side,
each on its own thread with half of torch's threads, forward and backward (no waiting
on each other's small per-step products). Under CPU autocast (``precision="bf16"``) the
matrix products run in bfloat16 (float32 accumulation) while the states stay float32.
The per-step loops run in C++ (``_packed_rnn.cpp``, built on first use by
``trainables._packed_rnn_cpp``; one product and one fused pass over the gates per step)
where it builds, float32/float64 CPU tensors; the Python functions below are the same
loops, the reference the tests hold the C++ ones to, and the fallback.
The recurrent matrix products (ATen, bfloat16 or oneDNN) are ``trainables._rnn_products``;
running the two directions side by side on two threads is ``trainables._rnn_directions``.
Same parameters and the same equations as ``nn.GRU`` (gates ordered r, z, n)::

    r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)
    z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
    h' = (1 - z) * n + z * h

and ``nn.LSTM`` (gates ordered i, f, g, o)::

    i, f, o = sigmoid(W_i* x + b_i* + W_h* h + b_h*)
    g = tanh(W_ig x + b_ig + W_hg h + b_hg)
    c' = f * c + i * g
    h' = o * tanh(c')
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainables import _packed_rnn_cpp, _rnn_products
from trainables._rnn_directions import both
from trainables._rnn_products import Products


class _Steps:
    """The packed rows of each step of one direction: ``batch_sizes[t]`` rows from
    ``offsets[t]``; ``reverse``: the direction that runs from the last step to the first."""

    def __init__(self, batch_sizes: list[int], offsets: list[int], reverse: bool) -> None:
        self.batch_sizes, self.offsets, self.reverse = batch_sizes, offsets, reverse

    def order(self, backward: bool) -> Iterator[tuple[slice, int]]:
        """(rows, count) of every step in the order the forward (``backward``: its
        backward) visits them."""
        last_first = self.reverse != backward
        t_order = range(len(self.batch_sizes))
        for t in reversed(t_order) if last_first else t_order:
            yield slice(self.offsets[t], self.offsets[t] + self.batch_sizes[t]), self.batch_sizes[t]


Saved = tuple[torch.Tensor, ...]
Low = torch.dtype | None  # the dtype of the recurrent matrix products, None: the weights'


def _gru_forward(
    gi: torch.Tensor, w_hh: torch.Tensor, b_hh: torch.Tensor, steps: _Steps, low: Low
) -> tuple[torch.Tensor, Saved]:
    """One direction's GRU recurrence over packed input projections ``gi`` (rows of step
    t at ``offsets[t]``, ``batch_sizes[t]`` of them, non-increasing in t): the hidden
    state of every packed row, and what the backward needs."""
    n = w_hh.shape[1]
    out = gi.new_empty(gi.shape[0], n)
    h_prev = gi.new_empty(gi.shape[0], n)  # the state each row's step started from
    gh = gi.new_empty(gi.shape[0], 3 * n)  # W_h h + b_h of every row
    rz = gi.new_empty(gi.shape[0], 2 * n)  # the r and z gates
    new = gi.new_empty(gi.shape[0], n)  # the candidate state n
    h = gi.new_zeros(steps.batch_sizes[0], n)
    products = Products(w_hh, low)
    for rows, size in steps.order(backward=False):
        hp = h[:size]
        h_prev[rows] = hp
        products.step(b_hh, hp, gh[rows])
        torch.add(gi[rows, : 2 * n], gh[rows, : 2 * n], out=rz[rows]).sigmoid_()
        torch.addcmul(gi[rows, 2 * n :], rz[rows, :n], gh[rows, 2 * n :], out=new[rows])
        new[rows].tanh_()
        torch.addcmul(new[rows], rz[rows, n:], hp - new[rows], out=out[rows])
        hp.copy_(out[rows])
    return out, (w_hh, h_prev, gh, rz, new)


def _gru_backward(saved: Saved, grad_out: torch.Tensor, steps: _Steps, low: Low) -> Saved:
    """The gradients of ``_gru_forward``'s ``gi``, ``w_hh`` and ``b_hh``."""
    w_hh, h_prev, gh, rz, new = saved
    n = w_hh.shape[1]
    products = Products(w_hh, low)
    d_gi = grad_out.new_empty(grad_out.shape[0], 3 * n)
    d_gh = grad_out.new_empty(grad_out.shape[0], 3 * n)
    d_h = grad_out.new_zeros(steps.batch_sizes[0], n)
    for rows, size in steps.order(backward=True):
        r, z, cand = rz[rows, :n], rz[rows, n:], new[rows]
        d = d_h[:size] + grad_out[rows]
        d_n = d * (1 - z) * (1 - cand * cand)  # through tanh
        d_gi[rows, 2 * n :] = d_n
        d_gi[rows, n : 2 * n] = d * (h_prev[rows] - cand) * z * (1 - z)
        d_gi[rows, :n] = d_n * gh[rows, 2 * n :] * r * (1 - r)
        d_gh[rows, : 2 * n] = d_gi[rows, : 2 * n]
        torch.mul(d_n, r, out=d_gh[rows, 2 * n :])
        products.back(d_gh[rows], d_h[:size], add=d * z)
    return d_gi, products.weight_grad(d_gh, h_prev), d_gh.sum(dim=0)


def _lstm_forward(
    gi: torch.Tensor, w_hh: torch.Tensor, b_hh: torch.Tensor, steps: _Steps, low: Low
) -> tuple[torch.Tensor, Saved]:
    """As ``_gru_forward``, for the LSTM: ``gi`` holds the 4n input projections."""
    n = w_hh.shape[1]
    out = gi.new_empty(gi.shape[0], n)
    h_prev = gi.new_empty(gi.shape[0], n)  # the states each row's step started from
    c_prev = gi.new_empty(gi.shape[0], n)
    gates = gi.new_empty(gi.shape[0], 4 * n)  # i, f, g, o after their nonlinearities
    tanh_c = gi.new_empty(gi.shape[0], n)  # tanh of the new cell state
    h = gi.new_zeros(steps.batch_sizes[0], n)
    c = gi.new_zeros(steps.batch_sizes[0], n)
    products = Products(w_hh, low)
    for rows, size in steps.order(backward=False):
        hp, cp = h[:size], c[:size]
        h_prev[rows] = hp
        c_prev[rows] = cp
        g = gates[rows]
        products.step(b_hh, hp, g)
        g += gi[rows]
        g[:, : 2 * n].sigmoid_()
        g[:, 2 * n : 3 * n].tanh_()
        g[:, 3 * n :].sigmoid_()
        cp.mul_(g[:, n : 2 * n]).addcmul_(g[:, :n], g[:, 2 * n : 3 * n])  # c' in place
        torch.tanh(cp, out=tanh_c[rows])
        torch.mul(g[:, 3 * n :], tanh_c[rows], out=out[rows])
        hp.copy_(out[rows])
    return out, (w_hh, h_prev, c_prev, gates, tanh_c)


def _lstm_backward(saved: Saved, grad_out: torch.Tensor, steps: _Steps, low: Low) -> Saved:
    """The gradients of ``_lstm_forward``'s ``gi``, ``w_hh`` and ``b_hh``."""
    w_hh, h_prev, c_prev, gates, tanh_c = saved
    n = w_hh.shape[1]
    products = Products(w_hh, low)
    d_gates = grad_out.new_empty(grad_out.shape[0], 4 * n)  # before the nonlinearities
    d_h = grad_out.new_zeros(steps.batch_sizes[0], n)
    d_c = grad_out.new_zeros(steps.batch_sizes[0], n)
    for rows, size in steps.order(backward=True):
        g, tc = gates[rows], tanh_c[rows]
        i, f, cand, o = g[:, :n], g[:, n : 2 * n], g[:, 2 * n : 3 * n], g[:, 3 * n :]
        d = d_h[:size] + grad_out[rows]
        dc = d_c[:size].addcmul_(d * o, 1 - tc * tc)  # d_c of this step
        dg = d_gates[rows]
        torch.mul(d * tc, o * (1 - o), out=dg[:, 3 * n :])
        torch.mul(dc * cand, i * (1 - i), out=dg[:, :n])
        torch.mul(dc * c_prev[rows], f * (1 - f), out=dg[:, n : 2 * n])
        torch.mul(dc * i, 1 - cand * cand, out=dg[:, 2 * n : 3 * n])
        dc.mul_(f)  # d_c of the previous step
        products.back(dg, d_h[:size])
    return d_gates, products.weight_grad(d_gates, h_prev), d_gates.sum(dim=0)


class _CppForward:
    """``_gru_forward`` / ``_lstm_forward`` (``cell``) with the loop in C++: the same
    outputs and saved tensors."""

    def __init__(self, cell: str) -> None:
        self.cell = cell

    def __call__(
        self, gi: torch.Tensor, w_hh: torch.Tensor, b_hh: torch.Tensor, steps: _Steps, low: Low
    ) -> tuple[torch.Tensor, Saved]:
        run = getattr(_packed_rnn_cpp.extension(), f"{self.cell}_forward")
        w_mm = Products(w_hh, low).step_weight
        out, *saved = run(gi, w_hh, w_mm, b_hh, steps.batch_sizes, steps.offsets, steps.reverse)
        return out, (w_hh, *saved)


def _gru_backward_cpp(saved: Saved, grad_out: torch.Tensor, steps: _Steps, low: Low) -> Saved:
    """``_gru_backward`` with the loop in C++."""
    w_hh, h_prev, gh, rz, new = saved
    products = Products(w_hh, low)
    d_gi, d_gh = _packed_rnn_cpp.extension().gru_backward(  # type: ignore[union-attr]
        products.back_weight, h_prev, gh, rz, new, grad_out, steps.batch_sizes, steps.offsets,
        steps.reverse,
    )  # fmt: skip
    return d_gi, products.weight_grad(d_gh, h_prev), d_gh.sum(dim=0)


def _lstm_backward_cpp(saved: Saved, grad_out: torch.Tensor, steps: _Steps, low: Low) -> Saved:
    """``_lstm_backward`` with the loop in C++."""
    w_hh, h_prev, c_prev, gates, tanh_c = saved
    products = Products(w_hh, low)
    (d_gates,) = _packed_rnn_cpp.extension().lstm_backward(  # type: ignore[union-attr]
        products.back_weight, c_prev, gates, tanh_c, grad_out, steps.batch_sizes, steps.offsets,
        steps.reverse,
    )  # fmt: skip
    return d_gates, products.weight_grad(d_gates, h_prev), d_gates.sum(dim=0)


# packed_bidirectional's default for ``side_by_side``; None: when torch has 2 threads or
# more (a benchmark sets it to compare the two)
SIDE_BY_SIDE: bool | None = None
# and for ``loop``: "cpp" or "python"; None: "cpp" where it applies and builds
LOOP: str | None = None
LOOPS = ("cpp", "python")
_KEEP: Any = object()  # ``variant``'s "leave this knob as it is"


@contextlib.contextmanager
def variant(
    *, side_by_side: bool | None = _KEEP, loop: str | None = _KEEP, onednn_from: int | None = _KEEP
) -> Iterator[None]:
    """Run the packed layers, for the time of the block, with their two directions side
    by side or not (``SIDE_BY_SIDE``), the per-step ``loop`` (``LOOP``) or oneDNN's
    products from ``onednn_from`` (``ONEDNN_FROM``; None: never): the benchmarks compare
    the variants. A knob not given stays as it is; every knob is restored after."""
    global SIDE_BY_SIDE, LOOP
    if loop is not _KEEP and loop is not None and loop not in LOOPS:
        raise ValueError(f"loop: got {loop!r}, expected one of {', '.join(LOOPS)} or None")
    before = SIDE_BY_SIDE, LOOP, _rnn_products.ONEDNN_FROM
    if side_by_side is not _KEEP:
        SIDE_BY_SIDE = side_by_side
    if loop is not _KEEP:
        LOOP = loop
    if onednn_from is not _KEEP:
        _rnn_products.ONEDNN_FROM = onednn_from
    try:
        yield
    finally:
        SIDE_BY_SIDE, LOOP, _rnn_products.ONEDNN_FROM = before


Forward = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, _Steps, Low], tuple[torch.Tensor, Saved]
]
Backward = Callable[[Saved, torch.Tensor, _Steps, Low], Saved]
_CELLS: dict[tuple[str, str], tuple[Forward, Backward]] = {
    ("gru", "python"): (_gru_forward, _gru_backward),
    ("lstm", "python"): (_lstm_forward, _lstm_backward),
    ("gru", "cpp"): (_CppForward("gru"), _gru_backward_cpp),
    ("lstm", "cpp"): (_CppForward("lstm"), _lstm_backward_cpp),
}


class _Bidirectional(torch.autograd.Function):
    """Both directions' recurrences over their packed input projections: the forward
    direction from the first step, the reverse one from the last."""

    @staticmethod
    def forward(
        ctx: Any,
        cell: tuple[str, str],
        batch_sizes: list[int],
        offsets: list[int],
        side_by_side: bool,
        low: Low,
        gi_f: torch.Tensor,
        w_f: torch.Tensor,
        b_f: torch.Tensor,
        gi_r: torch.Tensor,
        w_r: torch.Tensor,
        b_r: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        forward, _ = _CELLS[cell]  # (cell, loop)
        steps = (_Steps(batch_sizes, offsets, False), _Steps(batch_sizes, offsets, True))
        inputs = ((gi_f, w_f, b_f), (gi_r, w_r, b_r))
        (out_f, saved_f), (out_r, saved_r) = both(
            lambda d: forward(*inputs[d], steps[d], low), side_by_side
        )
        ctx.save_for_backward(*saved_f, *saved_r)
        ctx.cell, ctx.steps, ctx.side_by_side, ctx.low = cell, steps, side_by_side, low
        ctx.count = len(saved_f)
        return out_f, out_r

    @staticmethod
    def backward(ctx: Any, grad_f: torch.Tensor, grad_r: torch.Tensor) -> tuple[Any, ...]:
        _, backward = _CELLS[ctx.cell]
        saved = ctx.saved_tensors
        halves = (saved[: ctx.count], saved[ctx.count :])
        grads = (grad_f.contiguous(), grad_r.contiguous())
        (d_f, d_r) = both(
            lambda d: backward(halves[d], grads[d], ctx.steps[d], ctx.low), ctx.side_by_side
        )
        return None, None, None, None, None, *d_f, *d_r


def _loop(loop: str | None, data: torch.Tensor) -> str:
    """The per-step loop to run: ``loop``, else ``LOOP``, else C++ where it applies."""
    loop = loop or LOOP
    if loop is not None and loop not in LOOPS:
        raise ValueError(f"loop: got {loop!r}, expected one of {LOOPS}")
    applies = data.device.type == "cpu" and data.dtype in (torch.float32, torch.float64)
    if loop == "cpp" and not applies:
        raise ValueError(f"loop: the C++ loop runs float32/float64 CPU tensors, got {data.dtype} "
                         f"on {data.device}")  # fmt: skip
    if loop is None:
        loop = "cpp" if applies and _packed_rnn_cpp.extension() is not None else "python"
    if loop == "cpp" and _packed_rnn_cpp.extension() is None:
        raise RuntimeError("loop: the C++ loop did not build here (see the warning above)")
    return loop


def packed_bidirectional(
    data: torch.Tensor,
    batch_sizes: torch.Tensor,
    rnn: nn.GRU | nn.LSTM,
    side_by_side: bool | None = None,
    low: torch.dtype | None = None,
    loop: str | None = None,
) -> torch.Tensor:
    """The output rows ``(sum of lengths, 2n)`` of the one-layer bidirectional ``rnn``
    (a GRU or an LSTM, ``batch_first`` or not: packed data are time-major either way) on
    the packed ``data`` with ``batch_sizes`` (a ``PackedSequence``'s fields), from zero
    states. ``side_by_side``: run the two directions on two threads, each with half of
    torch's threads (default: when torch has 2 threads or more). ``low``: the dtype of
    the recurrent matrix products (``torch.bfloat16``; default: the weights'). ``loop``:
    "cpp" (default where it applies: float32/float64 CPU tensors, and the extension
    builds) or "python"."""
    cell = ("lstm" if isinstance(rnn, nn.LSTM) else "gru", _loop(loop, data))
    sizes = batch_sizes.tolist()
    offsets = [0]
    for size in sizes[:-1]:
        offsets.append(offsets[-1] + size)
    if side_by_side is None:
        side_by_side = SIDE_BY_SIDE if SIDE_BY_SIDE is not None else torch.get_num_threads() >= 2
    args: list[torch.Tensor] = []
    for suffix in ("", "_reverse"):
        w_ih, b_ih = getattr(rnn, f"weight_ih_l0{suffix}"), getattr(rnn, f"bias_ih_l0{suffix}")
        w_hh, b_hh = getattr(rnn, f"weight_hh_l0{suffix}"), getattr(rnn, f"bias_hh_l0{suffix}")
        if low is None:
            gi = F.linear(data, w_ih, b_ih)
        else:  # the input projections too; the recurrence adds them to float32 state
            gi = F.linear(data.to(low), w_ih.to(low), b_ih.to(low)).to(data.dtype)
        args += [gi, w_hh, b_hh]
    out_f, out_r = _Bidirectional.apply(cell, sizes, offsets, side_by_side, low, *args)
    return torch.cat((out_f, out_r), dim=1)
