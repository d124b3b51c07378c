"""The CPU's packed inference path (``trainables.embedding``,
``CaptionEncoder.encode_packed``): the same embeddings as the padded path within the
reordered-sums bound, for both cells, both poolings, one head or several, every length
(one character included); the packing of a fixed set is made once and kept, and remade
when the set changes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence

from tests.tolerances import assert_close
from trainables import embedding, families
from trainables.config import TrainConfig
from trainables.embedding import embed_captions, embed_sentences
from trainables.model import CaptionEncoder, CharEncoding, GroundedEncoder, PackedCaptions

SENTENCES = [
    "A red circle.",
    "",
    "b",
    "Two small blue squares left of a green triangle!",
    "x" * 90,
    "ab",
    "A red circle.",
    "é",
    "a green star above a square",
    "c",
]
SHAPES = [
    ("gru", "attention", 1),
    ("gru", "attention", 3),
    ("gru", "max", 1),
    ("lstm", "attention", 1),
    ("lstm", "attention", 2),
    ("lstm", "max", 1),
]


def _model(rnn: str, pooling: str, heads: int, seed: int = 0, **more: object) -> GroundedEncoder:
    torch.manual_seed(seed)
    config = TrainConfig(
        hidden_size=6, rnn_type=rnn, pooling=pooling, attention_heads=heads, **more
    )
    return GroundedEncoder(config, feature_dim=10).eval()


def _both_paths(monkeypatch: pytest.MonkeyPatch, embed) -> tuple[torch.Tensor, torch.Tensor]:
    with monkeypatch.context() as patch:  # the padded path, the reference, on the CPU too
        patch.setattr(embedding, "_packs", lambda models, precision: False)
        padded = embed()
    return padded, embed()


@pytest.mark.parametrize(("rnn", "pooling", "heads"), SHAPES)
@pytest.mark.parametrize("batch_size", [3, 0])
def test_the_packed_path_embeds_as_the_padded_one(
    monkeypatch: pytest.MonkeyPatch, rnn: str, pooling: str, heads: int, batch_size: int
) -> None:
    models = [_model(rnn, pooling, heads), _model(rnn, pooling, heads, seed=1)]
    padded, packed = _both_paths(
        monkeypatch, lambda: embed_sentences(models, SENTENCES, batch_size=batch_size)
    )
    assert packed.shape == padded.shape == (len(SENTENCES), 12 * heads)
    assert packed.dtype == padded.dtype == torch.float32
    assert_close(packed, padded, same_kernels=False)  # float32, another order of the sums
    assert not torch.equal(packed[0], packed[3])  # (not all alike)


@pytest.mark.parametrize(("rnn", "pooling", "heads"), SHAPES)
def test_the_packed_encoder_matches_forward_in_float64(rnn: str, pooling: str, heads: int) -> None:
    encoder = _model(rnn, pooling, heads).caption_encoder.double()
    assert isinstance(encoder, CaptionEncoder)
    chars, lengths = (torch.from_numpy(a) for a in CharEncoding().encode(SENTENCES))
    order = torch.argsort(lengths, descending=True, stable=True)
    with torch.inference_mode():
        expected = encoder(chars[order].long(), lengths[order])
        got = encoder.encode_packed(PackedCaptions.of(chars[order], lengths[order]))
    assert got.dtype == torch.float64
    assert_close(got, expected, same_kernels=False)  # float64: 1e-12


def test_a_word_model_embeds_alike_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    config = TrainConfig(hidden_size=6, encoder="word_rnn", word_embedding_dim=5)
    vocabulary = families.build_tokenizer(config, SENTENCES * 2)
    torch.manual_seed(0)
    model = GroundedEncoder(config, feature_dim=10, tokenizer=vocabulary).eval()
    padded, packed = _both_paths(monkeypatch, lambda: embed_sentences([model], SENTENCES))
    assert_close(packed, padded, same_kernels=False)


def test_the_packing_is_a_packed_sequence_of_the_sorted_captions() -> None:
    chars, lengths = (torch.from_numpy(a) for a in CharEncoding().encode(["abc", "de", "f", "g"]))
    captions = PackedCaptions.of(chars, lengths)
    theirs = pack_padded_sequence(chars, lengths, batch_first=True)
    assert torch.equal(captions.tokens, theirs.data)
    assert torch.equal(captions.batch_sizes, theirs.batch_sizes)
    assert captions.slots.tolist() == [0, 1, 2, 3, 0, 1, 0] and captions.count == 4
    with pytest.raises(ValueError, match="non-increasing"):
        PackedCaptions.of(chars.flip(0), lengths.flip(0))


def test_a_set_is_packed_once_and_again_when_it_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model("gru", "attention", 1)
    encoding = CharEncoding()
    first = embedding._packing_of_sentences(encoding, SENTENCES, 4)
    assert embedding._packing_of_sentences(encoding, list(SENTENCES), 4) is first
    assert embedding._packing_of_sentences(CharEncoding(), SENTENCES, 4) is not first
    # a sentence set seen again counts its unknown symbols again, as encoding it would
    counting = CharEncoding()
    for _ in range(2):
        embed_sentences([model], SENTENCES, encoding=counting)
    once = CharEncoding()
    once.encode(SENTENCES)
    assert counting.unknown_count == 2 * once.unknown_count == 4  # "" and "é", twice
    # tensors: kept by identity, packed again once changed in place
    chars, lengths = (torch.from_numpy(a) for a in CharEncoding().encode(SENTENCES))
    before = embed_captions([model], chars, lengths, batch_size=4)
    assert embedding._packing_of(chars, lengths, 4) is embedding._packing_of(chars, lengths, 4)
    chars[0, :3] = chars[3, :3]
    after = embed_captions([model], chars, lengths, batch_size=4)
    monkeypatch.setattr(embedding, "_packs", lambda models, precision: False)  # padded
    assert_close(after, embed_captions([model], chars, lengths, batch_size=4), same_kernels=False)
    assert not torch.allclose(after[0], before[0])
    np.testing.assert_array_equal(after[1:].numpy(), before[1:].numpy())


@pytest.mark.parametrize("encoder", ["word_bow", "cap2img"])
def test_other_families_and_bf16_keep_the_padded_path(encoder: str) -> None:
    sized = {"hidden_size": 6} if encoder == "cap2img" else {}
    config = TrainConfig(encoder=encoder, word_embedding_dim=5, **sized)
    vocabulary = families.build_tokenizer(config, SENTENCES * 2)
    torch.manual_seed(0)
    model = GroundedEncoder(config, feature_dim=10, tokenizer=vocabulary).eval()
    assert not embedding._packs([model], "fp32")
    assert not embedding._packs([_model("gru", "attention", 1)], "bf16")
    assert embedding._packs([_model("gru", "attention", 1)], "fp32")
