"""The recurrence of many bidirectional GRU/LSTM layers at once, for horizontally fused
training (``trainables.fused``): M weight sets (k members x 2 directions) step through
their sequences together, one batched matrix product (``torch.baddbmm`` over
``(M, batch, n)``) per time step for all of them. cuDNN's RNN takes one weight set per
call, so k models of the same shapes would otherwise launch k times as many small kernels.

The batch is padded, not packed: every member and direction runs every step of the
longest caption. The reverse direction reads each caption reversed *within its length*
(``reverse_within``), so both directions run left-aligned over the same steps and stack
into one recurrence; its outputs are reversed back the same way. Left-aligned, a row
past its caption's end only computes states that no valid output depends on: they are
zeroed (masked) afterwards, so their gradient is exactly zero, and the padding steps
change nothing, neither values nor gradients (the padding character's embedding gets a
zero gradient, as ``nn.Embedding(padding_idx=...)`` gives it).

The equations and parameter layout are ``nn.GRU``'s (gates r, z, n) and ``nn.LSTM``'s
(gates i, f, g, o), written as ``trainables._packed_rnn`` writes them::

    GRU:  n = tanh(gi_n + r * gh_n);  h' = n + z * (h - n)
    LSTM: c' = f * c + i * g;         h' = o * tanh(c')
"""

from __future__ import annotations

import torch

__all__ = ["CELLS", "reverse_within", "stacked_recurrence"]

CELLS = ("gru", "lstm")
GATES = {"gru": 3, "lstm": 4}


def reverse_within(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``x`` ``(M, B, T, ...)`` with the first ``lengths[m, b]`` steps of each row
    reversed and the padding steps after them left in place; ``lengths`` ``(M, B)`` on
    ``x``'s device. Its own inverse."""
    steps = torch.arange(x.shape[2], device=x.device)
    last = lengths.unsqueeze(-1) - 1  # (M, B, 1)
    index = torch.where(steps <= last, last - steps, steps)  # (M, B, T)
    index = index.view(*index.shape, *([1] * (x.dim() - 3))).expand_as(x)
    return torch.gather(x, 2, index)


def stacked_recurrence(
    gi: torch.Tensor, w_hh: torch.Tensor, b_hh: torch.Tensor, cell: str
) -> torch.Tensor:
    """The hidden states ``(M, B, T, n)`` of M independent one-direction GRUs or LSTMs
    (``cell``) from zero states: ``gi`` ``(M, B, T, G n)`` the input projections
    (``W_ih x + b_ih`` of every step), ``w_hh`` ``(M, G n, n)``, ``b_hh`` ``(M, G n)``;
    G = 3 (GRU) or 4 (LSTM). Differentiable by autograd."""
    if cell not in GATES:
        raise ValueError(f"cell: got {cell!r}, expected one of {', '.join(CELLS)}")
    m, b, _, width = gi.shape
    n = w_hh.shape[2]
    if width != GATES[cell] * n or w_hh.shape != (m, width, n) or b_hh.shape != (m, width):
        raise ValueError(
            f"stacked_recurrence: gi {tuple(gi.shape)}, w_hh {tuple(w_hh.shape)}, b_hh "
            f"{tuple(b_hh.shape)} do not fit a {cell} of {GATES[cell]} gates"
        )
    weight = w_hh.transpose(1, 2)  # (M, n, G n): h @ W_hh^T as one batched product
    bias = b_hh.unsqueeze(1)  # (M, 1, G n)
    h = gi.new_zeros(m, b, n)
    c = gi.new_zeros(m, b, n) if cell == "lstm" else None
    outputs = []
    for step in gi.unbind(2):  # unbind: one backward op, not a zero-filled slice per step
        gh = torch.baddbmm(bias, h, weight)
        if c is None:
            rz = torch.sigmoid(step[..., : 2 * n] + gh[..., : 2 * n])
            new = torch.tanh(torch.addcmul(step[..., 2 * n :], rz[..., :n], gh[..., 2 * n :]))
            h = torch.addcmul(new, rz[..., n:], h - new)
        else:
            gates = gh + step
            i, f = torch.sigmoid(gates[..., :n]), torch.sigmoid(gates[..., n : 2 * n])
            g, o = torch.tanh(gates[..., 2 * n : 3 * n]), torch.sigmoid(gates[..., 3 * n :])
            c = torch.addcmul(c * f, i, g)
            h = o * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs, dim=2)
