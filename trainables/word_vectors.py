"""Pretrained word vectors from a local GloVe-format text file (never downloaded).

The format is GloVe's own: one word per line, then its numbers, separated by single
spaces (``the 0.418 0.24968 -0.41242 ...``), UTF-8. A first line of two integers (the
word count and the dimension) is word2vec's text header: it is read and its dimension
checked. The word is everything before the last ``dim`` fields, so the few words of
``glove.840B.300d.txt`` that contain spaces (``. . .``) are read whole; a "word" whose
last space-separated part is a number is taken for a line with too many numbers.

Only the vocabulary's words are kept (an exact match of the lower-cased word; the first
line of a word listed twice wins). Every line's field count is checked, the numbers of
the lines kept are parsed: a line of another dimension, a number that is not one (or not
finite), an empty line or file, or bytes that are not UTF-8 are a ``ConfigError`` naming
``word_vectors``, the file and the line. Reading ``glove.840B.300d.txt`` (2.2M lines,
5.6 GB) takes a while, once per training run.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from trainables.config import ConfigError
from trainables.vocabulary import WordVocabulary

__all__ = ["PretrainedVectors", "load_word_vectors"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class PretrainedVectors:
    """Rows for a vocabulary's indices; ``found[i]`` says whether row i came from the
    file (padding, the unknown word and words the file lacks did not)."""

    vectors: np.ndarray  # (vocabulary.size, dim) float32
    found: np.ndarray  # (vocabulary.size,) bool
    source: str  # the file


def _fail(where: str, number: int, problem: str) -> ConfigError:
    return ConfigError("word_vectors", f"{where}, line {number}: {problem}")


def _decoded(raw: bytes, where: str, number: int) -> str:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _fail(
            where, number, f"not UTF-8 text (byte {raw[err.start]:#04x} at column {err.start + 1})"
        ) from None
    if number == 1:
        line = line.removeprefix("\ufeff")
    return line.rstrip("\r\n")


def _header_dimension(line: str, dim: int) -> int | None:
    """The dimension a word2vec text header (``COUNT DIM``) states; None if ``line`` is
    not one (a 1-d vector file has two fields per line too: read it as vectors)."""
    fields = line.split()
    if dim == 1 or len(fields) != 2 or not all(f.isdigit() for f in fields):
        return None
    return int(fields[1])


def _vector(line: str, where: str, number: int, dim: int, first: bool) -> tuple[str, list[str]]:
    """The word and the ``dim`` number fields of one line."""
    if not line.strip():
        raise _fail(where, number, "is empty; expected a word and its numbers")
    parts = line.rsplit(" ", dim)
    # a word with spaces in it ending in a number: a line with more than dim numbers
    extra = " " in parts[0] and _is_number(parts[0].rsplit(" ", 1)[1])
    if len(parts) != dim + 1 or not parts[0] or extra:
        count = len(line.split(" ")) - 1
        if first:
            problem = (
                f"a word and {count} numbers (vectors of {count} dimensions), but "
                f"word_embedding_dim is {dim}"
            )
        else:
            problem = f"a word and {count} numbers, expected {dim} as on the lines before"
        raise _fail(where, number, problem)
    return parts[0], parts[1:]


def _parsed(numbers: list[str], where: str, number: int) -> np.ndarray:
    try:
        row = np.array(numbers, dtype=np.float32)
    except ValueError:
        bad = next(n for n in numbers if not _is_number(n))
        raise _fail(where, number, f"{bad[:30]!r} is not a number") from None
    if not np.isfinite(row).all():
        raise _fail(where, number, "a number is not finite (nan or inf)")
    return row


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _opened(where: str) -> BinaryIO:
    try:
        return open(where, "rb")
    except OSError as err:
        raise ConfigError(
            "word_vectors", f"{where}: cannot be read ({err.strerror or err})"
        ) from None


def load_word_vectors(
    path: str | os.PathLike[str], vocabulary: WordVocabulary, dim: int
) -> PretrainedVectors:
    """The file's vectors for ``vocabulary``'s words (see the module docstring)."""
    where = os.fspath(path)
    vectors = np.zeros((vocabulary.size, dim), dtype=np.float32)
    found = np.zeros(vocabulary.size, dtype=bool)
    wanted = {word: vocabulary.index(word) for word in vocabulary.words}
    first_vector = True
    with _opened(where) as handle:
        for number, raw in enumerate(handle, start=1):
            line = _decoded(raw, where, number)
            if number == 1 and (stated := _header_dimension(line, dim)) is not None:
                if stated != dim:
                    problem = f"a header for {stated}-d vectors, but word_embedding_dim is {dim}"
                    raise _fail(where, 1, problem)
                continue
            word, numbers = _vector(line, where, number, dim, first_vector)
            first_vector = False
            index = wanted.get(word)
            if index is not None and not found[index]:
                vectors[index] = _parsed(numbers, where, number)
                found[index] = True
    if first_vector:
        problem = "no word vectors in it (empty, or a header alone)"
        raise ConfigError("word_vectors", f"{where}: {problem}")
    logger.info(
        "word vectors: %d of the %d vocabulary words found in %s",
        int(found.sum()),
        len(vocabulary),
        where,
    )
    return PretrainedVectors(vectors, found, where)
