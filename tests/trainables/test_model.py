"""The encoders: alphabet, masking, shapes, normalisation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainables.config import TrainConfig
from trainables.model import ALPHABET, PAD_INDEX, UNKNOWN_INDEX, CharEncoding, GroundedEncoder


def test_alphabet_is_printable_with_padding_and_unknown() -> None:
    encoding = CharEncoding()
    chars, lengths = encoding.encode(["0a", "é\x07"])
    assert len(ALPHABET) == 100 and PAD_INDEX == 0 and UNKNOWN_INDEX == 101
    assert chars[0, 0] == ALPHABET.index("0") + 1 != PAD_INDEX  # '0' is a character, not padding
    assert chars[1].tolist() == [UNKNOWN_INDEX, UNKNOWN_INDEX]
    assert lengths.tolist() == [2, 2] and encoding.unknown_count == 2
    padded, _ = encoding.encode(["abc", "a"])
    assert padded[1].tolist() == [ALPHABET.index("a") + 1, PAD_INDEX, PAD_INDEX]


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
@pytest.mark.parametrize("pooling", ["attention", "max"])
def test_embedding_does_not_depend_on_the_rest_of_the_batch(rnn_type: str, pooling: str) -> None:
    torch.manual_seed(0)
    model = GroundedEncoder(
        TrainConfig(hidden_size=8, rnn_type=rnn_type, pooling=pooling), 6
    ).eval()
    encoding = CharEncoding()
    short = "A red circle."
    alone = model.caption_encoder(*map(torch.from_numpy, _long(encoding.encode([short]))))
    with_long = model.caption_encoder(
        *map(
            torch.from_numpy,
            _long(
                encoding.encode(
                    [short, "A much longer caption about a blue square far to the left of a star!"]
                )
            ),
        )
    )
    torch.testing.assert_close(with_long[0], alone[0], rtol=1e-5, atol=1e-6)
    assert with_long.shape == (2, 16)
    torch.testing.assert_close(with_long.norm(dim=1), torch.ones(2))


def _long(encoded: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    chars, lengths = encoded
    return chars.astype(np.int64), lengths


def test_image_encoder_is_linear_then_normalised() -> None:
    torch.manual_seed(0)
    model = GroundedEncoder(TrainConfig(hidden_size=4), 10)
    features = torch.randn(3, 10)
    out = model.image_encoder(features)
    linear = model.image_encoder.linear
    expected = torch.nn.functional.normalize(features @ linear.weight.T + linear.bias, dim=-1)
    torch.testing.assert_close(out, expected)
    assert out.shape == (3, 8)
    # Xavier-uniform: every weight within the Glorot bound.
    bound = (6 / (10 + 8)) ** 0.5
    assert linear.weight.abs().max() <= bound


def test_attention_has_one_weight_per_feature_and_step() -> None:
    model = GroundedEncoder(TrainConfig(hidden_size=8, attention_hidden=128), 4)
    attention = model.caption_encoder.attention
    assert attention is not None
    assert attention.hidden.in_features == 16 and attention.hidden.out_features == 128
    assert attention.out.out_features == 16
    assert model.caption_encoder.embedding.embedding_dim == 20
    rnn = model.caption_encoder.rnn
    assert rnn.bidirectional and rnn.num_layers == 1 and rnn.hidden_size == 8


@pytest.mark.parametrize("enforce_sorted", [False, True])
@pytest.mark.parametrize("extra", [0, 3])
def test_padded_is_pad_packed_sequence_forward_and_backward(
    enforce_sorted: bool, extra: int
) -> None:
    from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

    from trainables.model import padded

    generator = torch.Generator().manual_seed(3)
    for _ in range(5):
        lengths = torch.randint(1, 12, (9,), generator=generator)
        if enforce_sorted:
            lengths = lengths.sort(descending=True).values
        width = int(lengths.max()) + extra
        x = torch.randn(9, width, 5, dtype=torch.float64, generator=generator)
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=enforce_sorted)
        ours_in, torch_in = (
            packed.data.clone().requires_grad_(),
            packed.data.clone().requires_grad_(),
        )
        fields = (packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices)
        ours = padded(PackedSequence(ours_in, *fields), width)
        theirs, _ = pad_packed_sequence(
            PackedSequence(torch_in, *fields), batch_first=True, total_length=width
        )
        assert torch.equal(ours, theirs)
        grad = torch.randn(theirs.shape, dtype=torch.float64, generator=generator)
        ours.backward(grad)
        theirs.backward(grad)
        assert ours_in.grad is not None and torch.equal(ours_in.grad, torch_in.grad)
