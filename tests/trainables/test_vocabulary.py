"""trainables.vocabulary and trainables.word_vectors: the tokenisation, a vocabulary of
the training captions, and GloVe-format files read in their real format (or refused,
naming the file and the line)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainables.config import ConfigError
from trainables.vocabulary import (
    PAD_INDEX,
    TOKEN_PATTERN,
    UNKNOWN_INDEX,
    Tokenizer,
    WordVocabulary,
    tokenize,
)
from trainables.word_vectors import load_word_vectors

CAPTIONS = [
    "A red circle.",
    "a RED square, left of a circle!",
    "There's a red circle",
    "two squares",
    "",
]


@pytest.mark.parametrize(
    ("caption", "tokens"),
    [
        ("There's a RED ball, left-of-centre.", ["there's", "a", "red", "ball", ",", "left",
                                                 "-", "of", "-", "centre", "."]),
        ("It’s 3 o'clock!!", ["it's", "3", "o'clock", "!", "!"]),
        ("dogs' bowls", ["dogs", "'", "bowls"]),
        ("  tabs\tand\nnew lines  ", ["tabs", "and", "new", "lines"]),
        ("snake_case x2", ["snake", "_", "case", "x2"]),
        ("Café ÉCLAIR", ["café", "éclair"]),
        ("", []),
    ],
)  # fmt: skip
def test_tokenisation_examples(caption: str, tokens: list[str]) -> None:
    assert tokenize(caption) == tokens


def test_build_counts_the_training_captions_most_frequent_first_ties_by_word() -> None:
    vocabulary = WordVocabulary.build(CAPTIONS)
    # a: 5, red: 3, circle: 3, square(s): 1+1 ... ties broken alphabetically
    assert vocabulary.words[:3] == ("a", "circle", "red")
    assert vocabulary.index("a") == 2 and vocabulary.index("circle") == 3
    assert vocabulary.size == len(vocabulary.words) + 2
    assert vocabulary.index("unseen") == UNKNOWN_INDEX and PAD_INDEX == 0
    assert vocabulary.index("\n") == UNKNOWN_INDEX  # the caption break is never a word
    assert isinstance(vocabulary, Tokenizer)


def test_min_count_and_size_cap() -> None:
    assert WordVocabulary.build(CAPTIONS, min_count=3).words == ("a", "circle", "red")
    assert WordVocabulary.build(CAPTIONS, min_count=2).words == ("a", "circle", "red")
    assert WordVocabulary.build(CAPTIONS, max_size=2).words == ("a", "circle")
    assert WordVocabulary.build(CAPTIONS, min_count=99).words == ()
    with pytest.raises(ValueError, match="min_count 0 must be >= 1"):
        WordVocabulary.build(CAPTIONS, min_count=0)


def test_deterministic_whatever_the_caption_order() -> None:
    shuffled = [CAPTIONS[i] for i in np.random.default_rng(0).permutation(len(CAPTIONS))]
    assert WordVocabulary.build(shuffled) == WordVocabulary.build(CAPTIONS)
    assert WordVocabulary.build(shuffled).words == WordVocabulary.build(CAPTIONS).words


def _reference_encode(vocabulary: WordVocabulary, captions: list[str]) -> list[list[int]]:
    """One caption at a time, the obvious way."""
    rows = []
    for caption in captions:
        ids = [vocabulary.index(token) for token in tokenize(caption)]
        rows.append(ids or [UNKNOWN_INDEX])
    return rows


def test_encode_matches_one_caption_at_a_time() -> None:
    vocabulary = WordVocabulary.build(CAPTIONS, min_count=2)
    captions = [*CAPTIONS, "A red\ncircle.", "zebra zebra", "   ", "A  red  circle  ."]
    indices, lengths = vocabulary.encode(captions)
    assert indices.dtype == np.int64 and lengths.dtype == np.int64
    expected = _reference_encode(vocabulary, captions)
    assert lengths.tolist() == [len(row) for row in expected]
    assert indices.shape == (len(captions), max(map(len, expected)))
    for row, want in zip(indices, expected, strict=True):
        assert row[: len(want)].tolist() == want and not row[len(want) :].any()
    # an empty caption is one unknown word; so is each word outside the vocabulary
    assert indices[4, 0] == UNKNOWN_INDEX and lengths[4] == 1
    assert indices[captions.index("zebra zebra")].tolist()[:2] == [UNKNOWN_INDEX] * 2
    assert vocabulary.unknown_count == sum(row.count(UNKNOWN_INDEX) for row in expected)


def test_encode_of_no_captions_and_of_one() -> None:
    vocabulary = WordVocabulary.build(CAPTIONS)
    indices, lengths = vocabulary.encode([])
    assert indices.shape == (0, 1) and lengths.shape == (0,)
    indices, lengths = vocabulary.encode(["a red circle"])
    assert indices.tolist() == [[2, 4, 3]] and lengths.tolist() == [3]


def test_state_round_trip_and_refusals() -> None:
    vocabulary = WordVocabulary.build(CAPTIONS, min_count=2, max_size=10)
    state = vocabulary.to_state()
    assert state["pattern"] == TOKEN_PATTERN and state["words"] == list(vocabulary.words)
    again = WordVocabulary.from_state(state)
    assert again == vocabulary and (again.min_count, again.max_size) == (2, 10)
    assert np.array_equal(again.encode(CAPTIONS)[0], vocabulary.encode(CAPTIONS)[0])
    with pytest.raises(ValueError, match="tokenised by the rule"):
        WordVocabulary.from_state({**state, "pattern": r"\w+"})
    with pytest.raises(ValueError, match="not a saved word vocabulary"):
        WordVocabulary.from_state({"alphabet": "abc"})
    with pytest.raises(ValueError, match="listed twice"):
        WordVocabulary.from_state({**state, "words": ["a", "a"]})
    with pytest.raises(ValueError, match="lower-case"):
        WordVocabulary.from_state({**state, "words": ["Red"]})


# -- GloVe-format files ------------------------------------------------------------


def _vectors_file(path: Path, lines: list[str] | bytes) -> Path:
    path.write_bytes(lines if isinstance(lines, bytes) else ("\n".join(lines) + "\n").encode())
    return path


def test_a_glove_file_in_its_real_format(tmp_path: Path) -> None:
    vocabulary = WordVocabulary.build(CAPTIONS)
    path = _vectors_file(
        tmp_path / "glove.txt",
        [
            "the 0.418 0.24968 -0.41242",
            "red -0.5 1e-3 2",
            ". . . 0.1 0.2 0.3",  # glove.840B has words with spaces: the last 3 fields are numbers
            "circle 1 2 3",
            "circle 9 9 9",  # a word listed twice: the first line wins
            "Red 7 7 7",  # words are matched exactly (the vocabulary is lower-case)
        ],
    )
    loaded = load_word_vectors(path, vocabulary, 3)
    assert loaded.vectors.shape == (vocabulary.size, 3) and loaded.vectors.dtype == np.float32
    red, circle = vocabulary.index("red"), vocabulary.index("circle")
    np.testing.assert_allclose(loaded.vectors[red], [-0.5, 1e-3, 2])
    np.testing.assert_allclose(loaded.vectors[circle], [1, 2, 3])
    assert loaded.found.sum() == 2 and loaded.found[[red, circle]].all()
    assert not loaded.found[[PAD_INDEX, UNKNOWN_INDEX]].any()


def test_a_word2vec_header_line_is_read_and_checked(tmp_path: Path) -> None:
    vocabulary = WordVocabulary.build(CAPTIONS)
    path = _vectors_file(tmp_path / "w2v.txt", ["2 3", "red 1 2 3", "a 4 5 6"])
    loaded = load_word_vectors(path, vocabulary, 3)
    np.testing.assert_allclose(loaded.vectors[vocabulary.index("a")], [4, 5, 6])
    with pytest.raises(ConfigError, match=r"w2v.txt, line 1: a header for 3-d vectors, but "):
        load_word_vectors(path, vocabulary, 5)
    bom = _vectors_file(tmp_path / "bom.txt", "\ufeffred 1 2 3\n".encode())
    assert load_word_vectors(bom, vocabulary, 3).found[vocabulary.index("red")]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (["red 1 2"], r"line 1: a word and 2 numbers \(vectors of 2 dimensions\), but "
                      r"word_embedding_dim is 3"),
        (["red 1 2 3", "a 1 2"], r"line 2: a word and 2 numbers, expected 3 as on the lines"),
        (["red 1 2 3", "a 1 2 3 4"], r"line 2: a word and 4 numbers, expected 3"),
        (["red 1 two 3"], r"line 1: 'two' is not a number"),
        (["red 1 nan 3"], r"line 1: a number is not finite"),
        (["red 1 2 3", "", "a 1 2 3"], r"line 2: is empty"),
        ([], r"no word vectors in it \(empty, or a header alone\)"),
        (["5 3"], r"no word vectors in it"),
        (b"red 1 2 3\na\xff\xfe 1 2 3\n", r"line 2: not UTF-8 text \(byte 0xff at column 2\)"),
    ],
)  # fmt: skip
def test_malformed_files_name_the_file_and_line(
    tmp_path: Path, content: list[str] | bytes, message: str
) -> None:
    path = tmp_path / "bad.txt"
    if content == []:
        path.write_bytes(b"")
    else:
        _vectors_file(path, content)
    with pytest.raises(ConfigError, match=message) as caught:
        load_word_vectors(path, WordVocabulary.build(CAPTIONS), 3)
    assert caught.value.field == "word_vectors" and str(path) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_missing_file_or_a_folder_is_named(tmp_path: Path) -> None:
    for path in (tmp_path / "nope.txt", tmp_path):
        with pytest.raises(ConfigError, match=rf"word_vectors: {path}: cannot be read"):
            load_word_vectors(path, WordVocabulary.build(CAPTIONS), 3)
