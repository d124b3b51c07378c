"""What differs between the caption encoder families of ``ModelConfig.encoder``, in one
place: each family's input (``Tokenizer``), how a run builds it from the training
captions, how checkpoints keep it, and each family's preset (its source's settings).

=============  ======================================  =====================================
family         input                                   caption encoder
=============  ======================================  =====================================
``char_rnn``   characters (``CharEncoding``, fixed     BiGRU/BiLSTM + vectorial attention
               alphabet)                               or max (Merkx & Frank 2019)
``word_rnn``   words (``WordVocabulary`` of the        the same, over word embeddings (the
               training captions)                      authors' ``flickr_words``)
``word_bow``   words (``WordVocabulary``)              normalised sum/mean of word
                                                       embeddings (VETE-BOW)
``vete_rnn``   words (``WordVocabulary``)              stacked GRU/LSTM, its final state
                                                       (VETE-RNN)
``cap2img``    words (``WordVocabulary``)              BiLSTM, max of the final states,
                                                       projected into the image-feature
                                                       space (GroundSent's Cap2Img)
=============  ======================================  =====================================

Two variants are presets of the same families rather than families: the multi-head
attention of the authors' later code (``attention_heads``, ``attention_penalty``) and the
text-only control (``pairing="caption"``: the caption encoder matched with another
caption of the same image, no image; GroundSent's Cap2Cap in spirit).

A checkpoint keeps the input beside the weights: ``alphabet`` (the characters; ``""``
for a word model) and ``vocabulary`` (``WordVocabulary.to_state()``; None for a
character model). Files written before word models existed have no ``vocabulary``: they
are character models.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from trainables.config import WORD_ENCODERS, ModelConfig
from trainables.model import ALPHABET, CharEncoding
from trainables.presets import PRESETS, preset
from trainables.vocabulary import Tokenizer, WordVocabulary
from trainables.word_vectors import PretrainedVectors, load_word_vectors

__all__ = [
    "PRESETS",
    "build_tokenizer",
    "load_pretrained",
    "preset",
    "tokenizer_entries",
    "tokenizer_from_entries",
]

logger = logging.getLogger(__name__)


def build_tokenizer(config: ModelConfig, train_captions: Iterable[str]) -> Tokenizer:
    """A run's input: the alphabet for characters, or the vocabulary of the *training*
    captions (``vocab_min_count``, ``vocab_max_size``) for a word family."""
    if config.encoder not in WORD_ENCODERS:
        return CharEncoding()
    vocabulary = WordVocabulary.build(
        train_captions, min_count=config.vocab_min_count, max_size=config.vocab_max_size
    )
    logger.info("vocabulary: %s from the training captions", vocabulary)
    return vocabulary


def load_pretrained(config: ModelConfig, tokenizer: Tokenizer) -> PretrainedVectors | None:
    """The ``word_vectors`` file's vectors for a word family's vocabulary (None when
    there is no file); a ``ConfigError`` naming the file and line when it is malformed."""
    if not config.word_vectors:
        return None
    assert isinstance(tokenizer, WordVocabulary), "word_vectors is a word family's setting"
    return load_word_vectors(config.word_vectors, tokenizer, config.word_embedding_dim)


def tokenizer_entries(tokenizer: Tokenizer) -> dict[str, Any]:
    """The checkpoint keys that keep ``tokenizer``: ``alphabet`` and ``vocabulary``."""
    if isinstance(tokenizer, WordVocabulary):
        return {"alphabet": "", "vocabulary": tokenizer.to_state()}
    assert isinstance(tokenizer, CharEncoding)
    return {"alphabet": tokenizer.alphabet, "vocabulary": None}


def tokenizer_from_entries(config: ModelConfig, state: Mapping[str, Any]) -> Tokenizer:
    """The input a checkpoint (``state``, with its ``alphabet`` and ``vocabulary``
    keys) was trained on; ``ValueError`` when it lacks what its family needs."""
    vocabulary = state.get("vocabulary")
    if config.encoder in WORD_ENCODERS:
        if vocabulary is None:
            raise ValueError(f"a {config.encoder} model without its vocabulary")
        return WordVocabulary.from_state(vocabulary)
    if vocabulary is not None:
        raise ValueError(f"a {config.encoder} model with a word vocabulary")
    alphabet = state.get("alphabet", ALPHABET)
    if not isinstance(alphabet, str) or not alphabet:
        raise ValueError(f"a {config.encoder} model without its alphabet")
    return CharEncoding(alphabet)
