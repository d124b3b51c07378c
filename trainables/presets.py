"""Each caption encoder family, and the two variants, at its source's settings: the
search spaces ``encoders`` and ``seeds_presets`` and users start from these (README
"Encoder families"). Pure data and ``TrainConfig``: no torch, so ``gridsearch`` reads it
cheaply.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainables.config import TrainConfig

__all__ = ["PRESETS", "SEED_SYSTEMS", "family_of", "preset"]


# Each family (and variant) at its source's settings (TrainConfig keys; the rest stay at
# the defaults, the paper's Flickr8k setting): the search spaces and users start from
# these. Epochs, seed and device are a run's, never a preset's.
PRESETS: dict[str, dict[str, Any]] = {
    # Merkx & Frank (2019): TrainConfig's defaults
    "char_rnn": {"encoder": "char_rnn"},
    # the authors' flickr_words/word_net.py: 300-d word embeddings, BiGRU 1024, attention
    # 128, one head; their word dictionaries keep training words seen 5 times or more;
    # gradient clipping off (their default)
    "word_rnn": {
        "encoder": "word_rnn",
        "word_embedding_dim": 300,
        "vocab_min_count": 5,
        "clip_image": 0.0,
        "clip_caption": 0.0,
    },
    # VETE-BOW (Kurach et al. 2017): 128-d embeddings, the mean of the word embeddings
    # (their best row of Table 3), the Pearson loss; no clipping is reported
    "word_bow": {
        "encoder": "word_bow",
        "word_embedding_dim": 128,
        "bow_pooling": "mean",
        "loss": "pearson",
        "clip_image": 0.0,
        "clip_caption": 0.0,
    },
    # VETE-RNN (Kurach et al. 2017): 128-d word and sentence embeddings, the LSTM (their
    # better RNN in Table 3), the Pearson loss. "Stacked" without a depth: we use 2 layers
    "vete_rnn": {
        "encoder": "vete_rnn",
        "word_embedding_dim": 128,
        "hidden_size": 128,
        "rnn_type": "lstm",
        "rnn_layers": 2,
        "loss": "pearson",
        "clip_image": 0.0,
        "clip_caption": 0.0,
    },
    # GroundSent's Cap2Img (Kiela et al. 2018, section 4): 300-d word inputs (GloVe kept
    # fixed behind a learned map in the paper: add word_vectors=PATH and
    # word_vectors_update=frozen_map), a 1024-unit BiLSTM, dropout 0.5, the bidirectional
    # margin ranking loss on cosine (margin tuned there, not given: ours, 0.2)
    "cap2img": {
        "encoder": "cap2img",
        "word_embedding_dim": 300,
        "hidden_size": 1024,
        "rnn_type": "lstm",
        "dropout": 0.5,
        "loss": "hinge",
        "clip_caption": 0.0,
    },
    # the authors' multi-head vectorial attention (their later code), two heads, the
    # diversity penalty off (its weight is a setting)
    "char_rnn_heads2": {"encoder": "char_rnn", "attention_heads": 2},
    # the text-only control: the paper's model trained on caption pairs, no image
    "char_rnn_text": {"encoder": "char_rnn", "pairing": "caption"},
}


def preset(name: str, **changes: Any) -> TrainConfig:
    """The preset ``name`` (a family, or a variant's name), with ``changes`` (TrainConfig
    keys) on top."""
    if name not in PRESETS:
        raise ValueError(f"preset: got {name!r}, expected one of {', '.join(PRESETS)}")
    return TrainConfig.from_dict({**PRESETS[name], **changes})


# the three seed systems of the project (the papers of docs/protocols.md), as their
# papers trained them
SEED_SYSTEMS = ("char_rnn", "word_bow", "vete_rnn", "cap2img")


def family_of(config: Mapping[str, Any]) -> str:
    """The family a configuration (TrainConfig keys, values as typed or as MLflow's
    strings) belongs to, as the report groups trials: its ``encoder``, with
    ``_heads{k}`` for k > 1 attention heads and ``_text`` for the text-only control, so
    every preset's configuration is its own name (``char_rnn_heads2``, ``char_rnn_text``)
    whatever its size, learning rate or margin. Keys a record lacks (runs logged before
    the families existed) take TrainConfig's defaults.

    >>> family_of({"encoder": "char_rnn", "attention_heads": "2", "margin": "0.3"})
    'char_rnn_heads2'
    >>> family_of({"hidden_size": 64})
    'char_rnn'
    """
    defaults = TrainConfig()
    name = str(config.get("encoder", defaults.encoder))
    heads = str(config.get("attention_heads", defaults.attention_heads))  # never fails
    if heads != str(defaults.attention_heads):
        name += f"_heads{heads}"
    if str(config.get("pairing", defaults.pairing)) == "caption":
        name += "_text"
    return name
