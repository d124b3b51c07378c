"""k ``GroundedEncoder`` s of the same shapes as one module (``trainables.fused``).

``FusedEncoder`` keeps every parameter of the member models stacked along a leading
member dimension, under the member model's own state-dict name (``member_state`` takes
one member back out as an ordinary ``GroundedEncoder`` state dict). Its forward is the
member models' forward, batched over members: the embedding lookup as one gather, the
image encoder and the input projections as batched linear maps (``torch.baddbmm``), the
bidirectional recurrence of all members and both directions as one
(``trainables._fused_rnn``), the attention heads batched over members, the masks and the
L2 normalisation as in ``trainables.model``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from trainables._fused_rnn import reverse_within, stacked_recurrence
from trainables.model import PAD_INDEX, GroundedEncoder

__all__ = ["FusedEncoder"]

_IMAGE = "image_encoder.linear"
_RNN = "caption_encoder.rnn"
_ATTENTION = "caption_encoder.attention"
_EMBEDDINGS = ("caption_encoder.embedding.weight", "caption_encoder.embedding.table.weight")


def _slot(name: str) -> str:
    """A state-dict name as a ``ParameterDict`` key (which takes no dots)."""
    return name.replace(".", "/")


class FusedEncoder(nn.Module):
    """The member models ``models`` (``GroundedEncoder`` s of one RNN family and the
    same shapes: ``trainables.fused.check_fusable``) as one module; their parameters are
    copied, stacked, never shared with them."""

    def __init__(self, models: Sequence[GroundedEncoder]) -> None:
        super().__init__()
        if not models:
            raise ValueError("models: expected at least one member model")
        first = models[0]
        encoder = first.caption_encoder
        rnn = getattr(encoder, "rnn", None)
        if not isinstance(rnn, nn.GRU | nn.LSTM):
            raise ValueError(
                "fused models: only the RNN families with pooling (char_rnn, word_rnn)"
            )
        self.cell = "lstm" if isinstance(rnn, nn.LSTM) else "gru"
        self.hidden_size = rnn.hidden_size
        self.pooling = str(encoder.pooling)
        self.tokenizer = encoder.tokenizer
        self.joint_dim, self.embedding_dim = first.joint_dim, first.embedding_dim
        states = [model.state_dict() for model in models]
        self.names = tuple(states[0])
        trainable = {name for name, p in first.named_parameters() if p.requires_grad}
        self.stacked = nn.ParameterDict(
            {
                _slot(name): nn.Parameter(
                    torch.stack([s[name].detach() for s in states]).clone(),
                    requires_grad=name in trainable,
                )
                for name in self.names
            }
        )
        self.embedding_name = next(n for n in _EMBEDDINGS if n in self.names)
        if any(n.startswith("caption_encoder.embedding.") and n != self.embedding_name
               for n in self.names):  # fmt: skip
            raise ValueError("fused models: a word embedding with a frozen_map is not fused")
        heads = sorted({n.split(".")[3] for n in self.names if n.startswith(f"{_ATTENTION}.heads")})
        self.heads = [f"{_ATTENTION}.heads.{h}" for h in heads] or (
            [_ATTENTION] if self.pooling == "attention" else []
        )

    @property
    def members(self) -> int:
        return int(self.param(self.names[0]).shape[0])

    def param(self, name: str) -> nn.Parameter:
        """The stacked ``(k, ...)`` parameter of the member models' ``name``."""
        return cast(nn.Parameter, self.stacked[_slot(name)])

    def member_state(self, member: int) -> dict[str, torch.Tensor]:
        """Member ``member``'s weights as its ``GroundedEncoder``'s state dict (copies)."""
        return {name: self.param(name)[member].detach().clone() for name in self.names}

    def keep(self, members: Sequence[int]) -> None:
        """Keep only the members at these positions (in this order), dropping the rest."""
        index = torch.as_tensor(list(members), dtype=torch.long)
        for name in self.names:
            old = self.param(name)
            self.stacked[_slot(name)] = nn.Parameter(
                old.detach()[index.to(old.device)].clone(), requires_grad=old.requires_grad
            )

    def groups(self) -> dict[str, list[nn.Parameter]]:
        """The trainable parameters by encoder (the two sides are clipped apart):
        ``"image"`` and ``"caption"``."""
        out: dict[str, list[nn.Parameter]] = {"image": [], "caption": []}
        for name in self.names:
            p = self.stacked[_slot(name)]
            if p.requires_grad:
                out["image" if name.startswith("image_encoder.") else "caption"].append(p)
        return out

    # -- forward -------------------------------------------------------------------------

    def forward(
        self, features: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each member's batch, ``features`` ``(k, B, D)``, ``tokens`` ``(k, B, T)`` and
        ``lengths`` ``(k, B)``, embedded: images and captions, ``(k, B, joint_dim)`` each."""
        return self.images(features), self.captions(tokens, lengths)

    def images(self, features: torch.Tensor) -> torch.Tensor:
        """``(k, B, joint_dim)`` embeddings of ``features`` ``(k, B, D)``, or of one batch
        ``(B, D)`` that every member embeds."""
        weight, bias = self.param(f"{_IMAGE}.weight"), self.param(f"{_IMAGE}.bias")
        if features.dim() == 2:
            features = features.unsqueeze(0).expand(self.members, *features.shape)
        projected = torch.baddbmm(bias.unsqueeze(1), features, weight.transpose(1, 2))
        return F.normalize(projected, dim=-1)

    def captions(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``(k, B, joint_dim)`` embeddings of ``tokens`` ``(k, B, T)`` with ``lengths``
        ``(k, B)``, or of one batch ``(B, T)``, ``(B,)`` that every member embeds."""
        if tokens.dim() == 2:
            tokens = tokens.unsqueeze(0).expand(self.members, *tokens.shape)
            lengths = lengths.unsqueeze(0).expand(self.members, *lengths.shape)
        mask = tokens != PAD_INDEX  # (k, B, T)
        states = self.states(tokens, lengths.to(tokens.device))
        if self.heads:
            pooled = torch.cat([self._attend(head, states, mask) for head in self.heads], dim=-1)
        else:
            pooled = states.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(dim=2)
        return F.normalize(pooled, dim=-1)

    def states(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The bidirectional RNN's outputs ``(k, B, T, 2n)``, zero on padded steps."""
        k, b, t = tokens.shape
        table = self.param(self.embedding_name)  # (k, V, d)
        offsets = torch.arange(k, device=tokens.device).view(k, 1, 1) * table.shape[1]
        embedded = F.embedding(tokens + offsets, table.reshape(-1, table.shape[2]))
        both = torch.cat((embedded, reverse_within(embedded, lengths)))  # (2k, B, T, d)
        w_ih, b_ih, w_hh, b_hh = (
            torch.cat((self.param(f"{_RNN}.{w}_l0"), self.param(f"{_RNN}.{w}_l0_reverse")))
            for w in ("weight_ih", "bias_ih", "weight_hh", "bias_hh")
        )
        gi = torch.baddbmm(b_ih.unsqueeze(1), both.reshape(2 * k, b * t, -1), w_ih.transpose(1, 2))
        out = stacked_recurrence(gi.view(2 * k, b, t, -1), w_hh, b_hh, self.cell)
        states = torch.cat((out[:k], reverse_within(out[k:], lengths)), dim=-1)
        return states.masked_fill((tokens == PAD_INDEX).unsqueeze(-1), 0.0)

    def _attend(self, head: str, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """One vectorial attention head (``trainables.attention``) of every member."""
        k, b, t, dim = states.shape
        flat = states.reshape(k, b * t, dim)
        hidden = torch.baddbmm(
            self.param(f"{head}.hidden.bias").unsqueeze(1),
            flat,
            self.param(f"{head}.hidden.weight").transpose(1, 2),
        ).tanh()
        scores = torch.baddbmm(
            self.param(f"{head}.out.bias").unsqueeze(1),
            hidden,
            self.param(f"{head}.out.weight").transpose(1, 2),
        ).view(k, b, t, dim)
        weights = torch.softmax(scores.masked_fill(~mask.unsqueeze(-1), float("-inf")), dim=2)
        return (weights * states).sum(dim=2)
