"""The CPU training path of the GRU and the LSTM (hand-written backwards) against
``nn.GRU`` and ``nn.LSTM``, with the per-step loops in C++ and in Python."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence

from trainables import _packed_rnn, _rnn_products
from trainables._packed_rnn import LOOPS, _loop, packed_bidirectional
from trainables._rnn_products import onednn
from trainables.config import TrainConfig
from trainables.model import CharEncoding, GroundedEncoder


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("side_by_side", [False, True])  # the directions on one/two threads
@pytest.mark.parametrize("cell", [torch.nn.GRU, torch.nn.LSTM])
@pytest.mark.parametrize(
    ("hidden", "lengths"),
    [(8, [5, 1, 3, 5, 2]), (16, [7]), (4, [3, 3, 3]), (32, [1, 9, 4, 12, 2, 2, 8])],
)
def test_outputs_and_gradients_match_torch(
    cell: type, hidden: int, lengths: list[int], side_by_side: bool, loop: str
) -> None:
    torch.manual_seed(0)
    rnn = cell(6, hidden, batch_first=True, bidirectional=True).double()
    x = torch.randn(len(lengths), max(lengths), 6, dtype=torch.float64, requires_grad=True)
    length_tensor = torch.tensor(lengths)
    results = []
    for use_torch in (True, False):
        packed = pack_padded_sequence(x, length_tensor, batch_first=True, enforce_sorted=False)
        if use_torch:
            out = rnn(packed)[0].data
        else:
            out = packed_bidirectional(
                packed.data, packed.batch_sizes, rnn, side_by_side, loop=loop
            )
        weights = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view_as(out)
        grads = torch.autograd.grad((out * weights).sum(), [x, *rnn.parameters()])
        results.append((out, grads))
    (expected, expected_grads), (got, got_grads) = results
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    for want, have in zip(expected_grads, got_grads, strict=True):
        torch.testing.assert_close(have, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_caption_encoder_trains_through_it_and_embeds_alike(rnn_type: str) -> None:
    torch.manual_seed(0)
    model = GroundedEncoder(TrainConfig(hidden_size=16, rnn_type=rnn_type), 4)
    chars, lengths = CharEncoding().encode(["a red cube", "two", "a big blue ball, left"])
    chars_t, lengths_t = torch.from_numpy(chars).long(), torch.from_numpy(lengths)
    training = model.caption_encoder(chars_t, lengths_t)  # grad enabled: the hand-written path
    assert training.grad_fn is not None
    with torch.inference_mode():  # nn.GRU / nn.LSTM
        inference = model.caption_encoder(chars_t, lengths_t)
    torch.testing.assert_close(training.detach(), inference, rtol=0, atol=1e-6)
    training.sum().backward()
    assert all(p.grad is not None for p in model.caption_encoder.rnn.parameters())


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("cell", [torch.nn.GRU, torch.nn.LSTM])
def test_bfloat16_products_stay_close_to_float32(cell: type, loop: str) -> None:
    torch.manual_seed(0)
    rnn = cell(20, 64, batch_first=True, bidirectional=True)
    lengths = torch.tensor([40, 7, 25, 33])
    x = torch.randn(4, 40, 20, requires_grad=True)
    results = []
    for low in (None, torch.bfloat16):
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out = packed_bidirectional(packed.data, packed.batch_sizes, rnn, False, low, loop)
        assert out.dtype == torch.float32  # the state stays float32
        grads = torch.autograd.grad(out.square().sum(), [x, *rnn.parameters()])
        results.append((out.detach(), grads))
    (want, want_grads), (got, got_grads) = results
    assert (got - want).abs().max() < 0.05 and not torch.equal(got, want)
    for expected, have in zip(want_grads, got_grads, strict=True):
        cosine = F.cosine_similarity(expected.flatten(), have.flatten(), dim=0)
        assert cosine > 0.995 and have.dtype == torch.float32


def _graph_names(fn: object, seen: set[str] | None = None) -> set[str]:
    seen = set() if seen is None else seen
    if fn is not None:
        seen.add(type(fn).__name__)
        for child, _ in getattr(fn, "next_functions", ()):
            _graph_names(child, seen)
    return seen


def test_bf16_autocast_trains_through_the_hand_written_layer_with_bf16_products() -> None:
    torch.manual_seed(0)
    model = GroundedEncoder(TrainConfig(hidden_size=16), 4)
    chars, lengths = CharEncoding().encode(["a red cube", "two", "a big blue ball, left"])
    chars_t, lengths_t = torch.from_numpy(chars).long(), torch.from_numpy(lengths)
    plain = model.caption_encoder(chars_t, lengths_t)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model.caption_encoder(chars_t, lengths_t)
    assert "_BidirectionalBackward" in _graph_names(low.grad_fn)
    assert 0 < (low.float() - plain).abs().max() < 0.05


@pytest.mark.parametrize("cell", [torch.nn.GRU, torch.nn.LSTM])
def test_the_two_loops_agree_in_float32_on_a_caption_sized_batch(cell: type) -> None:
    torch.manual_seed(0)
    rnn = cell(20, 48, batch_first=True, bidirectional=True)
    lengths = torch.tensor([61, 30, 45, 99, 30, 72])
    x = torch.randn(6, 99, 20, requires_grad=True)
    results = []
    for loop in LOOPS:
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out = packed_bidirectional(packed.data, packed.batch_sizes, rnn, True, loop=loop)
        grads = torch.autograd.grad(out.square().sum(), [x, *rnn.parameters()])
        results.append((out.detach(), grads))
    (want, want_grads), (got, got_grads) = results
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    for expected, have in zip(want_grads, got_grads, strict=True):
        torch.testing.assert_close(have, expected, rtol=1e-4, atol=1e-4)


def test_the_default_loop_is_the_compiled_one_on_the_cpu() -> None:
    rnn = torch.nn.GRU(3, 4, bidirectional=True)
    packed = pack_padded_sequence(torch.randn(5, 2, 3), torch.tensor([5, 3]))
    assert _loop(None, packed.data) == "cpp"
    assert _loop(None, packed.data.half()) == "python"  # not a dtype the C++ loop has
    with pytest.raises(ValueError, match="float32/float64 CPU"):
        packed_bidirectional(packed.data.half(), packed.batch_sizes, rnn.half(), loop="cpp")
    with pytest.raises(ValueError, match="expected one of"):
        packed_bidirectional(packed.data, packed.batch_sizes, rnn, loop="fortran")


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch without oneDNN")
@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("cell", [torch.nn.GRU, torch.nn.LSTM])
def test_onednn_products_give_the_layer_s_outputs_and_gradients(
    cell: type, loop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """float32 products in oneDNN (from ONEDNN_FROM, here every n) against torch's own
    module in float64: as close as ATen's mm products are."""
    torch.manual_seed(1)
    rnn = cell(20, 48, batch_first=True, bidirectional=True)
    lengths = torch.tensor([61, 30, 45, 99, 30, 72])
    x = torch.randn(6, 99, 20, requires_grad=True)
    results = {}
    for onednn_from in (1, None):
        monkeypatch.setattr(_rnn_products, "ONEDNN_FROM", onednn_from)
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out = packed_bidirectional(packed.data, packed.batch_sizes, rnn, True, loop=loop)
        grads = torch.autograd.grad(out.square().sum(), [x, *rnn.parameters()])
        results[onednn_from] = (out.detach(), grads)
    reference = copy.deepcopy(rnn).double()
    x64 = x.detach().double().requires_grad_()
    packed = pack_padded_sequence(x64, lengths, batch_first=True, enforce_sorted=False)
    out64 = reference(packed)[0].data
    grads64 = torch.autograd.grad(out64.square().sum(), [x64, *reference.parameters()])
    for out, grads in results.values():
        torch.testing.assert_close(out.double(), out64, rtol=0, atol=1e-5)
        for have, want in zip(grads, grads64, strict=True):
            torch.testing.assert_close(have.double(), want, rtol=1e-4, atol=1e-4)


def test_onednn_runs_the_float32_cpu_products_from_its_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_rnn_products, "ONEDNN_FROM", 64)
    small, large = torch.randn(96, 32), torch.randn(192, 64)
    available = torch.backends.mkldnn.is_available() and _rnn_products._X86
    assert not onednn(small, None) and onednn(large, None) == available
    assert not onednn(large.double(), None)  # float64: the equivalence tests' mm
    assert not onednn(large, torch.bfloat16)  # bf16 products: ATen's
    monkeypatch.setattr(_rnn_products, "ONEDNN_FROM", None)
    assert not onednn(large, None)
    if available:
        monkeypatch.setattr(_rnn_products, "ONEDNN_FROM", 64)
        products = _rnn_products.Products(large, None)
        assert products.step_weight.is_mkldnn and products.back_weight.is_mkldnn
        h, d = torch.randn(5, 64), torch.randn(5, 192)
        out, back = torch.empty(5, 192), torch.empty(5, 64)
        products.step(torch.zeros(192), h, out)
        products.back(d, back)
        torch.testing.assert_close(out, h @ large.t(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(back, d @ large, rtol=1e-5, atol=1e-5)


def test_the_public_variant_switch_sets_and_restores_each_knob() -> None:
    from trainables import packed_rnn_variant

    before = _packed_rnn.SIDE_BY_SIDE, _packed_rnn.LOOP, _rnn_products.ONEDNN_FROM
    with packed_rnn_variant(side_by_side=False, loop="python", onednn_from=None):
        assert (_packed_rnn.SIDE_BY_SIDE, _packed_rnn.LOOP, _rnn_products.ONEDNN_FROM) == (
            False,
            "python",
            None,
        )
        with packed_rnn_variant(loop="cpp"):  # a knob not given stays as it is
            assert (_packed_rnn.SIDE_BY_SIDE, _packed_rnn.LOOP) == (False, "cpp")
        assert _packed_rnn.LOOP == "python"
    assert before == (_packed_rnn.SIDE_BY_SIDE, _packed_rnn.LOOP, _rnn_products.ONEDNN_FROM)
    with pytest.raises(ValueError, match="loop: got 'fortran'"), packed_rnn_variant(loop="fortran"):
        pass
    assert before[1] == _packed_rnn.LOOP


# Two trainings of the side-by-side layer from the same seed, in a process of its own:
# its helper thread is new there. 16 captions of 45 to 60 characters (840 packed rows):
# the backward's weight gradient, (64 x 840) @ (840 x 16), is long enough that MKL gives
# it other low bits on 2 threads than on 1, and the gates' gradient (64 x 840 elements)
# large enough that its sum sets a new thread's count (torch does it lazily) in the
# first training, after that product.
TWO_TRAININGS = """
import torch
from torch.nn.utils.rnn import pack_padded_sequence
from trainables._packed_rnn import packed_bidirectional

torch.set_num_threads(2)  # a direction each, on 1 thread


def train():
    torch.manual_seed(0)
    rnn = torch.nn.LSTM(8, 16, batch_first=True, bidirectional=True)
    x, lengths = torch.randn(16, 60, 8), torch.arange(60, 44, -1)
    for _ in range(2):  # steps of plain gradient descent (torch.optim takes 1 s to import)
        packed = pack_padded_sequence(x, lengths, batch_first=True)
        out = packed_bidirectional(packed.data, packed.batch_sizes, rnn, side_by_side=True)
        grads = torch.autograd.grad(out.square().sum(), list(rnn.parameters()))
        with torch.no_grad():
            for parameter, grad in zip(rnn.parameters(), grads, strict=True):
                parameter -= 1e-3 * grad
    return list(rnn.parameters())


first, second = train(), train()
print(all(torch.equal(a, b) for a, b in zip(first, second, strict=True)))
"""


def test_a_process_s_first_training_is_bit_identical_to_its_later_ones() -> None:
    """The helper thread runs its direction with half of torch's threads from its first
    product on: a new thread's OpenMP and MKL thread counts are its own, every core,
    until torch sets them (it can only fail on a machine of 2 cores or more)."""
    done = subprocess.run(
        [sys.executable, "-c", TWO_TRAININGS], capture_output=True, text=True, timeout=120,
        check=False, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True", "the first training's weights differ from the second's"
