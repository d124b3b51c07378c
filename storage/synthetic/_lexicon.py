"""Words for the embedded world: the synonyms training captions use, and the ones they never do.

Every word list is split in two. ``TRAIN_*`` words appear in the training captions;
``HELD_OUT_*`` words appear only in the semantic evaluation sets, so those sets test
whether an encoder generalises beyond the phrasings it was trained on (as real STS
sentences use words no caption corpus contains). :func:`held_out_phrases` lists the
held-out words and forms, and the tests check that no training caption contains one.
"""

from __future__ import annotations

import random
import re

from storage.synthetic._scenes import COLOUR_NAMES, RELATIONS, SHAPES, SIZES

# Repeating a word in a list makes it the more frequent choice.
TRAIN_SHAPE: dict[str, tuple[str, ...]] = {
    "circle": ("circle", "circle", "disc", "round shape"),
    "square": ("square", "square", "box"),
    "triangle": ("triangle",),
    "star": ("star",),
    "cross": ("cross", "cross", "plus sign"),
    "diamond": ("diamond", "diamond", "rhombus"),
    "heart": ("heart",),
    "hexagon": ("hexagon",),
}
HELD_OUT_SHAPE: dict[str, tuple[str, ...]] = {
    "circle": ("orb", "disk"),
    "square": ("block", "tile"),
    "triangle": ("wedge", "trigon"),
    "star": ("pentagram", "starburst"),
    "cross": ("cruciform", "crosslet"),
    "diamond": ("lozenge",),
    "heart": ("valentine",),
    "hexagon": ("six-sided figure", "hex"),
}
TRAIN_COLOUR: dict[str, tuple[str, ...]] = {c: (c,) for c in COLOUR_NAMES}
HELD_OUT_COLOUR: dict[str, tuple[str, ...]] = {
    "red": ("scarlet", "crimson"),
    "orange": ("amber", "tangerine"),
    "yellow": ("golden", "lemon"),
    "green": ("emerald", "lime"),
    "blue": ("azure", "navy"),
    "purple": ("violet", "lilac"),
    "pink": ("rose", "magenta"),
    "brown": ("chocolate", "tan"),
}
TRAIN_SIZE: dict[str, tuple[str, ...]] = {
    "small": ("small", "small", "little"),
    "medium": ("medium", "medium-sized", "mid-sized"),
    "large": ("large", "big", "large"),
}
HELD_OUT_SIZE: dict[str, tuple[str, ...]] = {
    "small": ("tiny", "minuscule"),
    "medium": ("average-sized", "moderately sized"),
    "large": ("huge", "enormous"),
}
TRAIN_RELATION: dict[str, tuple[str, ...]] = {
    "left of": ("to the left of", "left of", "on the left of"),
    "right of": ("to the right of", "right of", "on the right of"),
    "above": ("above", "over"),
    "below": ("below", "under"),
    "next to": ("next to", "beside"),
}
HELD_OUT_RELATION: dict[str, tuple[str, ...]] = {
    "left of": ("west of", "leftward of"),
    "right of": ("east of", "rightward of"),
    "above": ("on top of", "higher up than"),
    "below": ("beneath", "lower down than"),
    "next to": ("alongside", "adjacent to"),
}
# "A red circle is flanked on the left by ..." style passives, keyed by the relation of
# the grammatical subject's partner: "B is <passive> A" means "A <relation> B".
PASSIVE_RELATION: dict[str, tuple[str, ...]] = {
    "left of": ("flanked on the left by", "bordered on its left by"),
    "right of": ("flanked on the right by", "bordered on its right by"),
    "above": ("topped by", "overshadowed by"),
    "below": ("propped up by", "underpinned by"),
    "next to": ("accompanied by", "flanked by"),
}
# Where a lone object sits; only training captions use these (semantic sets compare
# content, and a scene's absolute positions are not part of its gold overlap).
ROWS = ("at the top", "in the middle", "at the bottom")
COLUMNS = ("on the left", "in the centre", "on the right")
CORNERS = {
    (0, 0): "in the top left corner",
    (0, 2): "in the top right corner",
    (2, 0): "in the bottom left corner",
    (2, 2): "in the bottom right corner",
}
COUNT_WORDS = ("no", "one", "two", "three")
# The setting, which captions mention now and then (as Flickr8k's mention the beach or
# the snow): the background's texture, and its tone when it is clearly dark or light.
TEXTURE_WORDS: dict[str, tuple[str, ...]] = {
    "plain": ("plain", "bare"),
    "stripes": ("striped", "stripy"),
    "checks": ("checked", "chequered"),
    "dots": ("dotted", "spotted"),
    "grain": ("grainy", "speckled"),
}
SETTING_TEMPLATES = ("on a {t} background", "against a {t} backdrop", "in front of a {t} wall")

assert set(TRAIN_SHAPE) == set(HELD_OUT_SHAPE) == set(SHAPES)
assert set(TRAIN_SIZE) == set(HELD_OUT_SIZE) == set(SIZES)
assert set(TRAIN_RELATION) == set(HELD_OUT_RELATION) == set(PASSIVE_RELATION) == set(RELATIONS)

# Forms that only the semantic sets use. Each is a regular expression that must match
# no training caption (a test checks it).
HELD_OUT_FORMS: dict[str, str] = {
    "question": r"\?",
    "senteval-style tokenisation": r" [.,;!?]",
    "relative clause": r"\b(which|that) (is|sits|lies)\b",
    "inverted sentence": r"^(To the|Left of|Right of|Above|Below|Next to|Beside)\b.* is (a|an) ",
    "passive": r"\b(flanked|bordered|topped|overshadowed|propped|underpinned|accompanied)\b",
    "unseen template": r"\b(scene contains|what we have here|looking at it|positioned|placed)\b",
    "long description": r"\b(in total|one of them|the last one)\b",
}


def held_out_phrases() -> list[str]:
    """Every held-out synonym, each as a whole-word regular expression."""
    words = {
        w
        for table in (HELD_OUT_SHAPE, HELD_OUT_COLOUR, HELD_OUT_SIZE, HELD_OUT_RELATION)
        for options in table.values()
        for w in options
    }
    return [rf"\b{re.escape(w)}\b" for w in sorted(words)]


def article(phrase: str) -> str:
    """``phrase`` with "a" or "an" in front."""
    return ("an " if phrase[:1].lower() in "aeiou" else "a ") + phrase


def capitalise(text: str) -> str:
    return text[:1].upper() + text[1:]


def _synonym_swaps() -> tuple[re.Pattern[str], dict[str, tuple[str, ...]]]:
    """One pattern matching every training synonym of a shape, colour, size or
    relation (longest first, so "medium-sized" wins over "medium" and "to the left of"
    over "left of"), and each one's held-out alternatives."""
    swaps: dict[str, tuple[str, ...]] = {}
    for train, held_out in (
        (TRAIN_SHAPE, HELD_OUT_SHAPE),
        (TRAIN_COLOUR, HELD_OUT_COLOUR),
        (TRAIN_SIZE, HELD_OUT_SIZE),
        (TRAIN_RELATION, HELD_OUT_RELATION),
    ):
        for key, words in train.items():
            for word in words:
                swaps[word] = held_out[key]
    alternatives = "|".join(re.escape(w) for w in sorted(swaps, key=len, reverse=True))
    return re.compile(rf"\b({alternatives})\b", re.IGNORECASE), swaps


_SWAP_PATTERN, _SWAPS = _synonym_swaps()


def with_held_out_synonyms(text: str, rng: random.Random) -> str:
    """``text`` with every training word for a shape, colour, size or relation replaced
    by one of its held-out synonyms (drawn by ``rng``; a capital initial kept): the same
    content in words no training caption uses, to measure what unseen synonyms do to an
    encoder."""

    def swap(match: re.Match[str]) -> str:
        found = match.group(0)
        new = rng.choice(_SWAPS[found.lower()])
        return new[:1].upper() + new[1:] if found[:1].isupper() else new

    return _SWAP_PATTERN.sub(swap, text)
