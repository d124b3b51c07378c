"""Training captions: five different descriptions of each scene.

Like crowd-sourced captions (Flickr8k, MSCOCO), the five captions of one image vary in
template, synonyms, capitalisation and punctuation, sometimes leave out a size or the
least salient object, and now and then contain a typo. They are written from the
``TRAIN_*`` word lists of :mod:`storage.synthetic._lexicon` only; the held-out words
and sentence forms are kept for the semantic sets.

Everything is drawn from one ``random.Random`` per world, scene after scene, so the
captions are a deterministic function of the seed (and of the scenes before them).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from storage.synthetic._lexicon import (
    COLUMNS,
    CORNERS,
    ROWS,
    SETTING_TEMPLATES,
    TEXTURE_WORDS,
    TRAIN_COLOUR,
    TRAIN_RELATION,
    TRAIN_SHAPE,
    TRAIN_SIZE,
    article,
    capitalise,
)
from storage.synthetic._scenes import SIZES, Scene, SceneObject

CAPTIONS_PER_IMAGE = 5
MIN_CHARS = 20
MAX_CHARS = 120
TYPO_RATE = 0.07  # fraction of training captions with one character-level typo
_SIZE_DROP = 0.3  # chance that a caption leaves an object's size out
_COLOUR_DROP = 0.05  # ... or its colour
_PARTIAL = {2: 0.15, 3: 0.3}  # chance that a caption skips the least salient object
SETTING_MENTION = 0.35  # chance that a caption also says what the background looks like
_DARK, _LIGHT = 105, 155  # background grey levels below / above which a tone is named
_ATTEMPTS = 200  # drafts per scene before giving up (never reached in practice)

# Templates by number of mentioned objects. Slots: {a}/{b}/{c} = object phrase with
# article, {A} = capitalised {a}, {pa}/{pb} = phrase without article, {sa}/{sb} = bare
# shape word, {rel}/{rel_cb} = relation phrases, {loc} = where a lone object sits.
_ONE = (
    "{A} {loc}.",
    "There is {a} {loc}.",
    "there's {a} {loc}",
    "{A} on its own.",
    "A picture of {a}.",
    "An image with {a} {loc}!",
    "Only {a} can be seen.",
    "{A}, nothing else",
    "Just one shape: {a} {loc}.",
)
_TWO = (
    "{A} {rel} {b}.",
    "there's {a} {rel} {b}",
    "Two shapes: {a} and {b}.",
    "I see {a} {rel} {b}!",
    "An image showing {a} {rel} {b}.",
    "{PA} {rel} {pb}",
    "{A} and {b}; the {sa} is {rel} the {sb}.",
    "The {pa} is {rel} the {pb}.",
    "{A} sits {rel} {b}",
)
_NEXT_TO = ("Two shapes: {a} and {b}, side by side", "{A} and {b} side by side.")
_THREE = (
    "{A} {rel} {b}, and {c} {rel_cb} the {sb}.",
    "Three shapes: {a}, {b} and {c}.",
    "there's {a}, {b} and {c}",
    "{A} {rel} {b} plus {c}.",
    "An image showing {a}, {b} and {c}!",
    "{A}, {b} and {c} are in the picture.",
    "I see {a} {rel} {b}; there is also {c}",
)
_TEMPLATES_BY_COUNT = {1: _ONE, 2: _TWO, 3: _THREE}


def object_phrase(
    obj: SceneObject,
    rng: random.Random,
    *,
    sizes: dict[str, tuple[str, ...]] = TRAIN_SIZE,
    colours: dict[str, tuple[str, ...]] = TRAIN_COLOUR,
    shapes: dict[str, tuple[str, ...]] = TRAIN_SHAPE,
    size_drop: float = 0.0,
    colour_drop: float = 0.0,
) -> tuple[str, str]:
    """("small red circle", "circle") from the given synonym tables: the phrase and its
    noun (for "the circle" later on); size and colour dropped with the given odds."""
    words = []
    if rng.random() >= size_drop:
        words.append(rng.choice(sizes[obj.size]))
    if rng.random() >= colour_drop:
        words.append(rng.choice(colours[obj.colour]))
    noun = rng.choice(shapes[obj.shape])
    words.append(noun)
    return " ".join(words), noun


def noun_slots(key: str, phrase: str, noun: str) -> dict[str, str]:
    """Template slots for one object phrase under ``key`` ("a", "b" or "c")."""
    return {
        key: article(phrase),
        key.upper(): capitalise(article(phrase)),
        f"p{key}": phrase,
        f"P{key.upper()}": capitalise(phrase),
        f"s{key}": noun,
    }


def location_phrase(obj: SceneObject, rng: random.Random) -> str:
    """Where a lone object sits, in words ("in the top left corner", "on the right")."""
    row, col = min(int(obj.y * 3), 2), min(int(obj.x * 3), 2)
    options = [ROWS[row] if row != 1 else "in the middle", COLUMNS[col]]
    if (row, col) in CORNERS:
        options.append(CORNERS[(row, col)])
    if (row, col) == (1, 1):
        options = ["in the centre", "in the middle"]
    return rng.choice(options)


def salience_order(scene: Scene, rng: random.Random) -> list[int]:
    """Object indices, largest first (ties in random order): captions mention big things."""
    keyed = [(-SIZES.index(o.size), rng.random(), k) for k, o in enumerate(scene.objects)]
    return [k for _, _, k in sorted(keyed)]


def _draft(scene: Scene, order: list[int], rng: random.Random) -> str:
    """One caption mentioning the objects ``order`` (largest first) or all but the last."""
    partial = len(order) > 1 and rng.random() < _PARTIAL[len(order)]
    order = order[:-1] if partial else list(order)
    rng.shuffle(order)  # mention order is free; the relations follow it
    objects = [scene.objects[k] for k in order]
    slots = {"loc": location_phrase(objects[0], rng)} if len(order) == 1 else {}
    for key, obj in zip("abc", objects, strict=False):
        phrase, noun = object_phrase(obj, rng, size_drop=_SIZE_DROP, colour_drop=_COLOUR_DROP)
        slots |= noun_slots(key, phrase, noun)
    templates = _TEMPLATES_BY_COUNT[len(order)]
    if len(order) >= 2:
        relation = scene.relation(order[0], order[1])
        slots["rel"] = rng.choice(TRAIN_RELATION[relation])
        if relation == "next to" and len(order) == 2:
            templates = templates + _NEXT_TO
    if len(order) == 3:
        slots["rel_cb"] = rng.choice(TRAIN_RELATION[scene.relation(order[2], order[1])])
    text = rng.choice(templates).format(**slots)
    if rng.random() < SETTING_MENTION:
        text = with_setting(text, scene, rng)
    return _punctuate(text, rng)


def setting_phrase(scene: Scene, rng: random.Random) -> str:
    """The background in words: "on a dark striped background"."""
    background = scene.background
    words = [rng.choice(TEXTURE_WORDS[background.texture])]
    grey = sum(background.colour) / 3
    if (grey < _DARK or grey > _LIGHT) and rng.random() < 0.5:
        words.insert(0, "dark" if grey < _DARK else "light")
    return rng.choice(SETTING_TEMPLATES).format(t=" ".join(words))


def with_setting(text: str, scene: Scene, rng: random.Random) -> str:
    """``text`` with the setting said before its final punctuation."""
    body = text.rstrip(".!?")
    return f"{body} {setting_phrase(scene, rng)}{text[len(body) :]}"


def _punctuate(text: str, rng: random.Random) -> str:
    """Vary the surface a little, as different annotators would."""
    roll = rng.random()
    if roll < 0.1:
        text = text.rstrip(".!")
    elif roll < 0.16:
        text = text[:1].lower() + text[1:]
    return text


def add_typo(text: str, rng: random.Random) -> str:
    """One character swap, drop or duplication inside a word (letters only, so the
    punctuation-based held-out forms can never appear by accident)."""
    letters = [k for k in range(len(text) - 1) if text[k].isalpha() and text[k + 1].isalpha()]
    if not letters:
        return text
    k = rng.choice(letters)
    kind = rng.randrange(3)
    if kind == 0:
        return text[:k] + text[k + 1] + text[k] + text[k + 2 :]
    if kind == 1:
        return text[:k] + text[k + 1 :]
    return text[:k] + text[k] + text[k:]


def training_captions(scene: Scene, rng: random.Random) -> list[str]:
    """``CAPTIONS_PER_IMAGE`` different captions of ``scene``, each 20-120 characters."""
    captions: list[str] = []
    order = salience_order(scene, rng)
    for _ in range(_ATTEMPTS):
        caption = _draft(scene, order, rng)
        if rng.random() < TYPO_RATE:
            caption = add_typo(caption, rng)
        if MIN_CHARS <= len(caption) <= MAX_CHARS and caption not in captions:
            captions.append(caption)
            if len(captions) == CAPTIONS_PER_IMAGE:
                return captions
    raise RuntimeError(f"could not write {CAPTIONS_PER_IMAGE} distinct captions for {scene}")


def caption_scenes(scenes: Sequence[Scene], seed: int) -> list[list[str]]:
    """Captions for every scene, drawn from one stream seeded by ``seed``."""
    rng = random.Random(seed)
    return [training_captions(scene, rng) for scene in scenes]


_WORD = re.compile(r"[a-z0-9]+(?:[-'][a-z0-9]+)*")


def tokenize(caption: str) -> list[str]:
    """Karpathy-style tokens: lower-cased words, punctuation dropped."""
    return _WORD.findall(caption.lower())
