"""Bidirectional GRU and LSTM layers over a packed batch, with hand-written backwards,
for training on the CPU.

``nn.GRU`` and ``nn.LSTM`` on the CPU run a packed sequence as autograd-recorded steps:
each step's backward zero-fills and adds a gradient the size of the *whole* packed input
projection ``(sum of lengths, 3n or 4n)``, and adds a ``3n x n`` (``4n x n``) weight
gradient. With n=1024 that memory traffic took more time than the matrix products (the
torch profiler: ``aten::fill_``/``aten::add_`` ahead of ``aten::mm``; see BENCHMARKS.md).
Here the input projections of all steps are one matrix product before the recurrence,
the recurrence keeps what its backward needs, and the backward computes the recurrent
weights' gradients as one matrix product over all steps. Same parameters and the same
equations as ``nn.GRU`` (gates ordered r, z, n)::

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

from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


def _steps(
    batch_sizes: list[int], offsets: list[int], last_first: bool
) -> Iterator[tuple[slice, int]]:
    """The packed rows of each step and how many there are, first step first or last
    step first."""
    order = range(len(batch_sizes) - 1, -1, -1) if last_first else range(len(batch_sizes))
    for t in order:
        yield slice(offsets[t], offsets[t] + batch_sizes[t]), batch_sizes[t]


class _PackedGRU(torch.autograd.Function):
    """One direction's recurrence over packed input projections ``gi`` (rows of step t
    at ``offsets[t]``, ``batch_sizes[t]`` of them, non-increasing in t); returns the
    hidden state of every packed row. ``reverse`` runs from the last step to the first."""

    @staticmethod
    def forward(
        ctx: Any,
        gi: torch.Tensor,
        w_hh: torch.Tensor,
        b_hh: torch.Tensor,
        batch_sizes: list[int],
        offsets: list[int],
        reverse: bool,
    ) -> torch.Tensor:
        n = w_hh.shape[1]
        out = gi.new_empty(gi.shape[0], n)
        h_prev = gi.new_empty(gi.shape[0], n)  # the state each row's step started from
        gh = gi.new_empty(gi.shape[0], 3 * n)  # W_h h + b_h of every row
        rz = gi.new_empty(gi.shape[0], 2 * n)  # the r and z gates
        new = gi.new_empty(gi.shape[0], n)  # the candidate state n
        h = gi.new_zeros(batch_sizes[0], n)
        w_hh_t = w_hh.t()
        for rows, size in _steps(batch_sizes, offsets, last_first=reverse):
            hp = h[:size]
            h_prev[rows] = hp
            torch.addmm(b_hh, hp, w_hh_t, out=gh[rows])
            torch.add(gi[rows, : 2 * n], gh[rows, : 2 * n], out=rz[rows]).sigmoid_()
            torch.addcmul(gi[rows, 2 * n :], rz[rows, :n], gh[rows, 2 * n :], out=new[rows])
            new[rows].tanh_()
            torch.addcmul(new[rows], rz[rows, n:], hp - new[rows], out=out[rows])
            hp.copy_(out[rows])
        ctx.save_for_backward(w_hh, h_prev, gh, rz, new)
        ctx.steps = (batch_sizes, offsets, reverse)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:
        w_hh, h_prev, gh, rz, new = ctx.saved_tensors
        batch_sizes, offsets, reverse = ctx.steps
        n = w_hh.shape[1]
        d_gi = grad_out.new_empty(grad_out.shape[0], 3 * n)
        d_gh = grad_out.new_empty(grad_out.shape[0], 3 * n)
        d_h = grad_out.new_zeros(batch_sizes[0], n)
        for rows, size in _steps(batch_sizes, offsets, last_first=not reverse):
            r, z, cand = rz[rows, :n], rz[rows, n:], new[rows]
            d = d_h[:size] + grad_out[rows]
            d_n = d * (1 - z) * (1 - cand * cand)  # through tanh
            d_gi[rows, 2 * n :] = d_n
            d_gi[rows, n : 2 * n] = d * (h_prev[rows] - cand) * z * (1 - z)
            d_gi[rows, :n] = d_n * gh[rows, 2 * n :] * r * (1 - r)
            d_gh[rows, : 2 * n] = d_gi[rows, : 2 * n]
            torch.mul(d_n, r, out=d_gh[rows, 2 * n :])
            torch.addmm(d * z, d_gh[rows], w_hh, out=d_h[:size])
        return d_gi, d_gh.t() @ h_prev, d_gh.sum(dim=0), None, None, None


class _PackedLSTM(torch.autograd.Function):
    """As ``_PackedGRU``, for the LSTM: ``gi`` holds the 4n input projections."""

    @staticmethod
    def forward(
        ctx: Any,
        gi: torch.Tensor,
        w_hh: torch.Tensor,
        b_hh: torch.Tensor,
        batch_sizes: list[int],
        offsets: list[int],
        reverse: bool,
    ) -> torch.Tensor:
        n = w_hh.shape[1]
        out = gi.new_empty(gi.shape[0], n)
        h_prev = gi.new_empty(gi.shape[0], n)  # the states each row's step started from
        c_prev = gi.new_empty(gi.shape[0], n)
        gates = gi.new_empty(gi.shape[0], 4 * n)  # i, f, g, o after their nonlinearities
        tanh_c = gi.new_empty(gi.shape[0], n)  # tanh of the new cell state
        h = gi.new_zeros(batch_sizes[0], n)
        c = gi.new_zeros(batch_sizes[0], n)
        w_hh_t = w_hh.t()
        for rows, size in _steps(batch_sizes, offsets, last_first=reverse):
            hp, cp = h[:size], c[:size]
            h_prev[rows] = hp
            c_prev[rows] = cp
            g = gates[rows]
            torch.addmm(b_hh, hp, w_hh_t, out=g)
            g += gi[rows]
            g[:, : 2 * n].sigmoid_()
            g[:, 2 * n : 3 * n].tanh_()
            g[:, 3 * n :].sigmoid_()
            cp.mul_(g[:, n : 2 * n]).addcmul_(g[:, :n], g[:, 2 * n : 3 * n])  # c' in place
            torch.tanh(cp, out=tanh_c[rows])
            torch.mul(g[:, 3 * n :], tanh_c[rows], out=out[rows])
            hp.copy_(out[rows])
        ctx.save_for_backward(w_hh, h_prev, c_prev, gates, tanh_c)
        ctx.steps = (batch_sizes, offsets, reverse)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:
        w_hh, h_prev, c_prev, gates, tanh_c = ctx.saved_tensors
        batch_sizes, offsets, reverse = ctx.steps
        n = w_hh.shape[1]
        d_gates = grad_out.new_empty(grad_out.shape[0], 4 * n)  # before the nonlinearities
        d_h = grad_out.new_zeros(batch_sizes[0], n)
        d_c = grad_out.new_zeros(batch_sizes[0], n)
        for rows, size in _steps(batch_sizes, offsets, last_first=not reverse):
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
            torch.mm(dg, w_hh, out=d_h[:size])
        return d_gates, d_gates.t() @ h_prev, d_gates.sum(dim=0), None, None, None


def packed_bidirectional(
    data: torch.Tensor, batch_sizes: torch.Tensor, rnn: nn.GRU | nn.LSTM
) -> torch.Tensor:
    """The output rows ``(sum of lengths, 2n)`` of the one-layer bidirectional ``rnn``
    (a GRU or an LSTM, ``batch_first`` or not: packed data are time-major either way) on
    the packed ``data`` with ``batch_sizes`` (a ``PackedSequence``'s fields), from zero
    states."""
    recurrence = _PackedLSTM if isinstance(rnn, nn.LSTM) else _PackedGRU
    sizes = batch_sizes.tolist()
    offsets = [0]
    for size in sizes[:-1]:
        offsets.append(offsets[-1] + size)
    outputs = []
    for suffix, reverse in (("", False), ("_reverse", True)):
        gi = F.linear(
            data, getattr(rnn, f"weight_ih_l0{suffix}"), getattr(rnn, f"bias_ih_l0{suffix}")
        )
        w_hh, b_hh = getattr(rnn, f"weight_hh_l0{suffix}"), getattr(rnn, f"bias_hh_l0{suffix}")
        outputs.append(recurrence.apply(gi, w_hh, b_hh, sizes, offsets, reverse))
    return torch.cat(outputs, dim=1)
