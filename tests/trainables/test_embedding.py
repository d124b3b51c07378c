"""trainables.embedding: an ensemble's embeddings are the sum of its models', in the
sentences' order, whatever the batching."""

from __future__ import annotations

import pytest
import torch

from trainables.config import TrainConfig
from trainables.embedding import default_batch_size, embed_captions, embed_images, embed_sentences
from trainables.model import CharEncoding, GroundedEncoder

SENTENCES = ["A red circle.", "", "Two small blue squares left of a green triangle!", "x" * 90]


def _models(n: int) -> list[GroundedEncoder]:
    torch.manual_seed(0)
    return [GroundedEncoder(TrainConfig(hidden_size=6), feature_dim=10).eval() for _ in range(n)]


@pytest.mark.parametrize("batch_size", [1, 2, 3, 0])
def test_captions_in_their_order_whatever_the_batches(batch_size: int) -> None:
    (model,) = _models(1)
    chars, lengths = CharEncoding().encode(SENTENCES)
    one_by_one = torch.cat(
        [
            model.caption_encoder(torch.from_numpy(c[None, :n]).long(), torch.tensor([n]))
            for c, n in zip(chars, lengths, strict=True)
        ]
    ).detach()
    got = embed_captions(
        [model], torch.from_numpy(chars), torch.from_numpy(lengths), batch_size=batch_size
    )
    torch.testing.assert_close(got, one_by_one, rtol=1e-5, atol=1e-6)


def test_an_ensemble_sums_its_models_on_both_sides_without_renormalising() -> None:
    models = _models(2)
    features = torch.randn(3, 10)
    images = embed_images(models, features)
    torch.testing.assert_close(images, sum(m.image_encoder(features) for m in models).detach())
    assert not torch.allclose(images.norm(dim=1), torch.ones(3))
    captions = embed_sentences(models, SENTENCES)
    separate = [embed_sentences([m], SENTENCES) for m in models]
    torch.testing.assert_close(captions, separate[0] + separate[1])


def test_batch_size_by_device() -> None:
    assert default_batch_size(torch.device("cpu")) == 256
    assert default_batch_size(torch.device("cuda")) == 1024
    with pytest.raises(ValueError, match="at least one model"):
        embed_images([], torch.zeros(1, 10))
