"""The optimiser step of every trial (``trainables.optim``): a lone model's Adam is
``torch.optim.Adam``'s bit for bit, and its checkpoint is torch's ``state_dict`` both
ways; stacked members are each their own Adam (and clipping) at their own learning rate,
in float64 (``REORDERED``: another order of the same operations)."""

from __future__ import annotations

import pytest
import torch

from tests.tolerances import assert_close
from trainables.optim import GroupAdam, clip_per_member

SHAPES = {"weight": (3, 4, 5), "bias": (3, 7), "scale": (3,)}


def _params(generator: torch.Generator, member: int | None = None) -> dict[str, torch.nn.Parameter]:
    stacked = {n: torch.randn(s, generator=generator) for n, s in SHAPES.items()}
    return {
        n: torch.nn.Parameter(t if member is None else t[member].clone())
        for n, t in stacked.items()
    }


def _grads(generator: torch.Generator) -> dict[str, torch.Tensor]:
    return {n: torch.randn(s, generator=generator) * 3 for n, s in SHAPES.items()}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_lone_models_adam_is_torchs_bit_for_bit(dtype: torch.dtype) -> None:
    """7 steps at a changing learning rate, with a parameter that never gets a gradient
    (the image side of the text-only control) and a frozen one: the weights are
    ``torch.optim.Adam``'s exactly. (One step count serves all parameters, as in a
    fused group: a parameter that misses some steps only would part from torch's.)"""
    generator = torch.Generator().manual_seed(0)
    ours = {n: p.to(dtype) for n, p in _params(generator).items()}
    ours = {n: torch.nn.Parameter(p.detach()) for n, p in ours.items()}
    ours["scale"].requires_grad_(False)
    theirs = {n: torch.nn.Parameter(p.detach().clone(), p.requires_grad) for n, p in ours.items()}
    adam = GroupAdam(ours)
    torch_adam = torch.optim.Adam(theirs.values(), lr=1e-3)
    for step in range(7):
        grads = _grads(generator)
        lr = 1e-3 * (step + 1)
        for params in (ours, theirs):
            for name, p in params.items():
                skip = name in ("scale", "bias")
                p.grad = None if skip else grads[name].to(dtype)
        adam.step(lr)
        for group in torch_adam.param_groups:
            group["lr"] = lr
        torch_adam.step()
        for name in ours:
            assert_close(
                ours[name].detach(),
                theirs[name].detach(),
                err_msg=f"{name}, step {step}",
                same_kernels=True,
            )
    assert adam.moments().keys() == {"weight", "bias"}  # the frozen one has none
    assert not adam.moments()["bias"][0].any()


def test_its_checkpoint_is_torchs_state_dict_both_ways() -> None:
    """A lone model's ``state_dict`` loads into ``torch.optim.Adam`` and torch's into
    ours, and either goes on as the other; a state of other parameters is refused."""
    generator = torch.Generator().manual_seed(1)
    start = _params(generator)

    def copy() -> dict[str, torch.nn.Parameter]:
        return {n: torch.nn.Parameter(p.detach().clone()) for n, p in start.items()}

    ours, theirs = copy(), copy()
    adam, torch_adam = GroupAdam(ours), torch.optim.Adam(theirs.values())
    assert adam.state_dict()["state"] == torch_adam.state_dict()["state"] == {}
    for _ in range(3):
        grads = _grads(generator)
        for params in (ours, theirs):
            for name, p in params.items():
                p.grad = grads[name].clone()
        adam.step(1e-3), torch_adam.step()
    mine, its = adam.state_dict(), torch_adam.state_dict()
    assert sorted(mine["state"]) == sorted(its["state"]) == [0, 1, 2]
    for index, entry in its["state"].items():
        for key, value in entry.items():
            assert_close(
                mine["state"][index][key], value, err_msg=f"{index} {key}", same_kernels=True
            )
    assert mine["param_groups"][0]["params"] == its["param_groups"][0]["params"]
    # each loads the other's state and both go on alike
    crossed, torch_crossed = copy(), copy()
    for target, source in ((crossed, ours), (torch_crossed, theirs)):
        for name, p in target.items():
            p.data.copy_(source[name].detach())
    mine_loaded = GroupAdam(crossed)
    mine_loaded.load_state_dict(its)
    torch_loaded = torch.optim.Adam(torch_crossed.values())
    torch_loaded.load_state_dict(mine)
    assert mine_loaded.steps == 3
    grads = _grads(generator)
    for params in (crossed, torch_crossed):
        for name, p in params.items():
            p.grad = grads[name].clone()
    mine_loaded.step(1e-3), torch_loaded.step()
    for name in crossed:
        assert_close(
            crossed[name].detach(), torch_crossed[name].detach(), err_msg=name, same_kernels=True
        )
    smaller = GroupAdam({"weight": copy()["weight"]})
    with pytest.raises(ValueError, match="holds 3 parameters, the model 1"):
        smaller.load_state_dict(mine)


@pytest.mark.usefixtures("float64")
def test_stacked_members_each_take_their_own_clipping_and_adam() -> None:
    """Per-member clipping (each by its own norm, 0 = off) and Adam at per-member
    learning rates over stacked parameters: torch's ``clip_grad_norm_`` and ``Adam`` on
    each member alone, for 5 steps; then a member dropped (``keep``) goes on as before."""
    generator = torch.Generator().manual_seed(0)
    stacked = _params(generator)
    lone = [{n: torch.nn.Parameter(p.detach()[m].clone()) for n, p in stacked.items()}
            for m in range(3)]  # fmt: skip
    lrs, limits = [1e-3, 3e-2, 1e-1], torch.tensor([0.5, 0.0, 2.0])
    adam = GroupAdam(stacked)
    theirs = [
        torch.optim.Adam(params.values(), lr=lr) for params, lr in zip(lone, lrs, strict=True)
    ]

    def steps(members: list[int], count: int) -> None:
        for _ in range(count):
            grads = _grads(generator)
            for name, p in stacked.items():
                p.grad = grads[name][members].clone()
            norms = clip_per_member(list(stacked.values()), limits[members])
            adam.step(torch.tensor(lrs)[members])
            for position, m in enumerate(members):
                for name, p in lone[m].items():
                    p.grad = grads[name][m].clone()
                norm = torch.nn.utils.clip_grad_norm_(
                    list(lone[m].values()), float(limits[m]) or float("inf")
                )
                assert_close(norms[position], norm, same_kernels=False)
                theirs[m].step()
                for name, p in lone[m].items():
                    assert_close(stacked[name].detach()[position], p.detach(),
                                 same_kernels=False, err_msg=f"member {m}, {name}")  # fmt: skip

    steps([0, 1, 2], 5)
    kept = [0, 2]
    stacked = {n: torch.nn.Parameter(p.detach()[kept].clone()) for n, p in stacked.items()}
    adam.keep(stacked, kept)
    steps(kept, 3)
