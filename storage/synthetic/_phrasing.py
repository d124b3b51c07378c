"""Full scene descriptions for the semantic sets, in training-like and held-out styles.

A sentence of an STS/SICK pair must describe its whole scene (every object with its
size and colour, and the relations that chain them), so that the gold score, computed
from the two scenes' content, is what the two sentences say. The *styles* say how it is
phrased; most of them use forms that no training caption uses (questions, inversions
and passives, relative clauses, unseen templates and synonyms, SentEval's lower-cased
tokenised text, long multi-sentence descriptions), so the sets test how far a
grounded encoder generalises beyond its training captions.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from storage.synthetic._captions import (
    SETTING_MENTION,
    add_typo,
    noun_slots,
    object_phrase,
    with_setting,
)
from storage.synthetic._lexicon import (
    COUNT_WORDS,
    HELD_OUT_COLOUR,
    HELD_OUT_RELATION,
    HELD_OUT_SHAPE,
    HELD_OUT_SIZE,
    PASSIVE_RELATION,
    TRAIN_COLOUR,
    TRAIN_RELATION,
    TRAIN_SHAPE,
    TRAIN_SIZE,
    capitalise,
)
from storage.synthetic._scenes import Scene

SENTENCE_SETTING = SETTING_MENTION

# Templates by object count (1, 2, 3); slots as in _captions plus {REL} (capitalised
# relation of a to b), {rel_bc} (b to c), {pass}/{pass_cb} (passive of a->b / c->b),
# {n} (number of objects in words).
_CAPTIONS = (
    ("There is {a} in the picture.", "A picture of {a}.", "{A} on its own.",
     "Only {a} can be seen."),
    ("{A} {rel} {b}.", "there's {a} {rel} {b}", "I see {a} {rel} {b}!",
     "An image showing {a} {rel} {b}.", "The {pa} is {rel} the {pb}."),
    ("{A} {rel} {b}, and {c} {rel_cb} the {sb}.",
     "there's {a} {rel} {b} and {c} {rel_cb} the {sb}",
     "I see {a} {rel} {b}; there is also {c} {rel_cb} the {sb}"),
)  # fmt: skip
_QUESTIONS = (
    ("Is there {a} in the picture?", "Can you see {a}?", "Do you see {a} here?"),
    ("Is there {a} {rel} {b}?", "Can you see {a} {rel} {b}?", "Is the {pa} {rel} the {pb}?"),
    ("Is there {a} {rel} {b}, and {c} {rel_cb} the {sb}?",
     "Can you see {a} {rel} {b} with {c} {rel_cb} the {sb}?"),
)  # fmt: skip
_PASSIVE = (
    ("Shown in the picture is {a}.", "Depicted here is {a}."),
    ("{REL} {b} is {a}.", "{B} is {pass} {a}."),
    ("{REL} {b} is {a}, and {rel_cb} the {sb} is {c}.", "{B} is {pass} {a} and {pass_cb} {c}."),
)  # fmt: skip
_RELATIVE = (
    ("{A} that is all by itself.", "A picture that shows {a}."),
    ("{A} that is {rel} {b}.", "{A}, which sits {rel} {b}.", "There is {a} which is {rel} {b}."),
    ("{A} that is {rel} {b}, which is {rel_bc} {c}.",
     "There is {a} which lies {rel} {b}, and {c} which is {rel_cb} the {sb}."),
)  # fmt: skip
_UNSEEN = (
    ("The scene contains {a} and nothing else.", "What we have here is {a}."),
    ("The scene contains {a} and {b}, with the {sa} {rel} the {sb}.",
     "What we have here is {a} positioned {rel} {b}.",
     "Looking at it, {a} is placed {rel} {b}."),
    ("The scene contains {a}, {b} and {c}; the {sa} is {rel} the {sb} and the {sc} is "
     "{rel_cb} the {sb}.",
     "What we have here is {a} positioned {rel} {b}, plus {c} placed {rel_cb} the {sb}."),
)  # fmt: skip
_LONG = (
    ("This image contains {n} shape in total. It is {a}, and there is nothing else "
     "to see anywhere in the whole picture.",),
    ("This image contains {n} shapes in total. One of them is {a}. The other one is {b}. "
     "The {sa} is {rel} the {sb}, and nothing else can be seen.",),
    ("This image contains {n} shapes in total. One of them is {a}. Another one is {b}, "
     "and the {sa} is {rel} the {sb}. The last one is {c}, which is {rel_cb} the {sb}.",),
)  # fmt: skip

_TRAIN_WORDS = (TRAIN_SIZE, TRAIN_COLOUR, TRAIN_SHAPE, TRAIN_RELATION)
# the training words split for the synonyms subtask: each thing's commonest word, and the
# others (the commonest again where there is no other)
_COMMONEST_WORDS = tuple({k: v[:1] for k, v in table.items()} for table in _TRAIN_WORDS)
_OTHER_WORDS = tuple(
    {k: tuple(w for w in v if w != v[0]) or v[:1] for k, v in table.items()}
    for table in _TRAIN_WORDS
)
_HELD_OUT_WORDS = (HELD_OUT_SIZE, HELD_OUT_COLOUR, HELD_OUT_SHAPE, HELD_OUT_RELATION)
Words = tuple[
    dict[str, tuple[str, ...]],
    dict[str, tuple[str, ...]],
    dict[str, tuple[str, ...]],
    dict[str, tuple[str, ...]],
]


def _slots(scene: Scene, rng: random.Random, words: Words) -> dict[str, str]:
    """Every slot a full description may use, for a random mention order."""
    sizes, colours, shapes, relations = words
    order = list(range(len(scene.objects)))
    rng.shuffle(order)
    slots = {"n": COUNT_WORDS[len(order)]}
    for key, k in zip("abc", order, strict=False):
        obj = scene.objects[k]
        phrase, noun = object_phrase(obj, rng, sizes=sizes, colours=colours, shapes=shapes)
        slots |= noun_slots(key, phrase, noun)
    if len(order) >= 2:
        relation = scene.relation(order[0], order[1])
        slots["rel"] = rng.choice(relations[relation])
        slots["REL"] = capitalise(slots["rel"])
        slots["pass"] = rng.choice(PASSIVE_RELATION[relation])
    if len(order) == 3:
        relation_cb = scene.relation(order[2], order[1])
        slots["rel_cb"] = rng.choice(relations[relation_cb])
        slots["rel_bc"] = rng.choice(relations[scene.relation(order[1], order[2])])
        slots["pass_cb"] = rng.choice(PASSIVE_RELATION[relation_cb])
    return slots


def _templated(
    table: tuple[tuple[str, ...], ...], words: Words = _TRAIN_WORDS
) -> Callable[[Scene, random.Random], str]:
    def describe(scene: Scene, rng: random.Random) -> str:
        slots = _slots(scene, rng, words)
        text = rng.choice(table[len(scene.objects) - 1]).format(**slots)
        return with_setting(text, scene, rng) if rng.random() < SENTENCE_SETTING else text

    return describe


_PTB = re.compile(r"'s\b|[\w-]+|[^\w\s]")


def senteval_style(text: str) -> str:
    """Lower-cased, tokenised text as in SentEval's STS copies: "a red circle ."."""
    return " ".join(_PTB.findall(text.lower()))


def _typos(scene: Scene, rng: random.Random) -> str:
    text = _STYLES["captions"](scene, rng)
    for _ in range(rng.choice((1, 2, 2, 3))):
        text = add_typo(text, rng)
    return text


def _senteval(scene: Scene, rng: random.Random) -> str:
    base = rng.choice(("captions", "relative-clauses", "unseen-templates", "passive"))
    return senteval_style(_STYLES[base](scene, rng))


def _mixed(scene: Scene, rng: random.Random) -> str:
    return _STYLES[rng.choice(MIXABLE)](scene, rng)


_STYLES: dict[str, Callable[[Scene, random.Random], str]] = {
    "captions": _templated(_CAPTIONS),
    "typos": _typos,
    "senteval-style": _senteval,
    "relative-clauses": _templated(_RELATIVE),
    "questions": _templated(_QUESTIONS),
    "passive": _templated(_PASSIVE),
    "unseen-templates": _templated(_UNSEEN),
    "unseen-synonyms": _templated(_CAPTIONS, _HELD_OUT_WORDS),
    "commonest-words": _templated(_CAPTIONS, _COMMONEST_WORDS),  # type: ignore[arg-type]
    "other-words": _templated(_CAPTIONS, _OTHER_WORDS),  # type: ignore[arg-type]
    "long": _templated(_LONG),
}
MIXABLE = tuple(_STYLES)  # the registers a "mixed" set draws from
_STYLES["word-order"] = _STYLES["captions"]  # its pairs are built apart (_semantic)
_STYLES["negation"] = _STYLES["captions"]  # ... and these, with denying() below
_STYLES["mixed"] = _mixed
STYLES: tuple[str, ...] = tuple(_STYLES)


# SICK's negation transformation ("there is no biker jumping in the air"), as a clause
# after a caption of what the picture does show
_DENIALS = (
    "{text}. There is no {x}.",
    "{text}, but there is no {x}.",
    "{text}, and no {x}.",
    "{text}; there is no {x} anywhere.",
)


def denying(text: str, phrase: str, rng: random.Random) -> str:
    """``text`` (a description) followed by a clause that denies ``phrase`` ("small red
    circle"): "A blue square on the left, but there is no small red circle." """
    return rng.choice(_DENIALS).format(text=text.rstrip(".!?; "), x=phrase)


def describe_scene(scene: Scene, style: str, rng: random.Random) -> str:
    """A sentence (or, for "long", a few) describing all of ``scene`` in ``style``."""
    try:
        writer = _STYLES[style]
    except KeyError:
        raise ValueError(f"style: expected one of {list(STYLES)}, got {style!r}") from None
    return writer(scene, rng)
