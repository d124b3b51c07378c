"""Word-level input: the tokenisation, and a vocabulary built from the training captions.

Tokenisation (stored with every word model, as the alphabet is with the character
model): the caption is lower-cased and the typographic apostrophe (U+2019) read as ``'``;
a **word** is a run of letters and digits, with apostrophes inside it kept (``there's``,
``o'clock``); **every other character that is not white space** is a token of its own
(``.``, ``,``, ``-``, ``!``, an apostrophe that does not sit between two letters)::

    >>> tokenize("There's a RED ball, left-of-centre.")
    ["there's", 'a', 'red', 'ball', ',', 'left', '-', 'of', '-', 'centre', '.']

A ``WordVocabulary`` holds the words of the training captions seen at least
``min_count`` times, most frequent first (ties broken by the word, so the same captions
always give the same indices), at most ``max_size`` of them (0 = no cap). Index 0 is
padding, 1 the unknown word (every word it does not hold); an empty caption encodes as
one unknown word, so that a recurrent encoder has a step to run.

``Tokenizer`` is what every caption encoder is fed by: this vocabulary or the character
model's ``trainables.model.CharEncoding``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "PAD_INDEX",
    "TOKEN_PATTERN",
    "UNKNOWN_INDEX",
    "Tokenizer",
    "WordVocabulary",
    "tokenize",
]

PAD_INDEX = 0
UNKNOWN_INDEX = 1
# a word (letters and digits, inner apostrophes kept), else one non-space character
TOKEN_PATTERN = r"[^\W_]+(?:'[^\W_]+)*|\S"
_TOKENS = re.compile(TOKEN_PATTERN)
_TOKENS_AND_BREAKS = re.compile(rf"\n|{TOKEN_PATTERN}")  # "\n" ends a caption
_STATE_KIND = "words"


@runtime_checkable
class Tokenizer(Protocol):
    """Captions -> ``(indices (B, T), lengths (B,))``, 0 = padding: what a caption
    encoder reads. ``size`` counts every index (padding and unknown included);
    ``unknown_count`` the symbols encoded so far that it mapped to its unknown index."""

    unknown_count: int

    @property
    def size(self) -> int: ...

    def encode(self, captions: Sequence[str]) -> tuple[np.ndarray, np.ndarray]: ...


def _normalised(text: str) -> str:
    return text.lower().replace("\u2019", "'")


def tokenize(caption: str) -> list[str]:
    """The tokens of one caption (see the module docstring)."""
    return _TOKENS.findall(_normalised(caption))


def _joined(captions: Iterable[str]) -> str:
    """All captions in one lower-cased text, one per line, so that one regular
    expression pass tokenises them all (a caption's own line breaks are spaces)."""
    return _normalised("\n".join(caption.replace("\n", " ") for caption in captions))


class WordVocabulary:
    """Words -> indices (see the module docstring). Build it with ``build`` from the
    training captions; save it with ``to_state`` and restore it with ``from_state``."""

    def __init__(self, words: Sequence[str], *, min_count: int = 1, max_size: int = 0) -> None:
        """``words``: the vocabulary in index order (index 2 first); ``min_count`` and
        ``max_size`` record how it was built."""
        self.words = tuple(words)
        if len(set(self.words)) != len(self.words):
            raise ValueError("vocabulary: a word is listed twice")
        if any(not isinstance(w, str) or w != _normalised(w) or not w for w in self.words):
            raise ValueError("vocabulary: every word must be a non-empty lower-case string")
        self.min_count = min_count
        self.max_size = max_size
        self.unknown_count = 0  # tokens mapped to UNKNOWN_INDEX so far
        self._index = {word: i for i, word in enumerate(self.words, start=2)}
        self._index["\n"] = -1  # a caption break, never a token

    @classmethod
    def build(
        cls, captions: Iterable[str], *, min_count: int = 1, max_size: int = 0
    ) -> WordVocabulary:
        """The words of ``captions`` seen at least ``min_count`` times, most frequent
        first, ties broken by the word; at most ``max_size`` of them (0 = all)."""
        if min_count < 1 or max_size < 0:
            raise ValueError(
                f"vocabulary: min_count {min_count} must be >= 1 and max_size {max_size} >= 0"
            )
        counts = Counter(_TOKENS_AND_BREAKS.findall(_joined(captions)))
        counts.pop("\n", None)
        kept = sorted(
            (w for w, n in counts.items() if n >= min_count), key=lambda w: (-counts[w], w)
        )
        return cls(kept[: max_size or None], min_count=min_count, max_size=max_size)

    @property
    def size(self) -> int:
        """Indices in all: the words, padding and the unknown word."""
        return len(self.words) + 2

    def index(self, word: str) -> int:
        """The index of one token (``UNKNOWN_INDEX`` when the vocabulary lacks it)."""
        found = self._index.get(word, UNKNOWN_INDEX)
        return UNKNOWN_INDEX if found < 0 else found

    def encode(self, captions: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(indices (B, T) int64, lengths (B,) int64)``; T is the longest caption in
        tokens. Every caption is tokenised in one pass over their joined text."""
        captions = list(captions)
        lookup = self._index.get
        ids = np.fromiter(
            (lookup(t, UNKNOWN_INDEX) for t in _TOKENS_AND_BREAKS.findall(_joined(captions))),
            dtype=np.int64,
        )
        breaks = np.flatnonzero(ids < 0)  # len(captions) - 1 of them
        starts = np.concatenate(([0], breaks + 1))[: len(captions)]
        ends = np.concatenate((breaks, [len(ids)]))[: len(captions)]
        lengths = (ends - starts).astype(np.int64)
        tokens = ids[ids >= 0]
        width = max(int(lengths.max()), 1) if len(captions) else 1
        out = np.zeros((len(captions), width), dtype=np.int64)
        out[np.arange(width) < lengths[:, None]] = tokens
        empty = lengths == 0
        out[empty, 0] = UNKNOWN_INDEX
        lengths[empty] = 1
        self.unknown_count += int((tokens == UNKNOWN_INDEX).sum() + empty.sum())
        return out, lengths

    def to_state(self) -> dict[str, Any]:
        """Plain strings, numbers and lists (a checkpoint loads them with
        ``weights_only=True``)."""
        return {
            "kind": _STATE_KIND,
            "pattern": TOKEN_PATTERN,
            "lowercase": True,
            "words": list(self.words),
            "min_count": self.min_count,
            "max_size": self.max_size,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> WordVocabulary:
        """The vocabulary ``to_state`` saved; ``ValueError`` for anything else, or one
        tokenised by a rule this code does not apply."""
        if not isinstance(state, Mapping) or state.get("kind") != _STATE_KIND:
            raise ValueError("vocabulary: not a saved word vocabulary")
        if state.get("pattern") != TOKEN_PATTERN or state.get("lowercase") is not True:
            raise ValueError(
                f"vocabulary: tokenised by the rule {state.get('pattern')!r} "
                f"(lowercase {state.get('lowercase')!r}); this code tokenises by "
                f"{TOKEN_PATTERN!r}, lower-cased"
            )
        words = state.get("words")
        if not isinstance(words, list):
            raise ValueError("vocabulary: its words are not a list")
        return cls(
            words, min_count=int(state.get("min_count", 1)), max_size=int(state.get("max_size", 0))
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WordVocabulary) and self.words == other.words

    __hash__ = None  # type: ignore[assignment]

    def __len__(self) -> int:
        return len(self.words)

    def __repr__(self) -> str:
        return (
            f"WordVocabulary({len(self.words)} words, min_count={self.min_count}, "
            f"max_size={self.max_size})"
        )
