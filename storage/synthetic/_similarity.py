"""Gold similarity of two scenes, and scene edits that make graded pairs.

The gold score of a sentence pair is the content overlap of the two scenes the
sentences fully describe: objects are matched one-to-one (shape counts most, then
colour, then size) and the spatial relations of matched pairs are compared. Identical
content scores 1; unrelated scenes score near 0. Pairs are built from a scene and an
edited copy of it (a few attributes changed, an object moved, added or removed), or an
unrelated scene, so the scores spread over the whole range.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

from storage.synthetic._scenes import (
    COLOUR_NAMES,
    MAX_OBJECTS,
    SHAPES,
    SIZES,
    Scene,
    SceneObject,
)

# How much each attribute contributes to the similarity of two matched objects.
_SHAPE_WEIGHT, _COLOUR_WEIGHT, _SIZE_WEIGHT = 0.5, 0.3, 0.2
_RELATION_WEIGHT = 0.3  # share of the relations in the overlap of multi-object scenes
SETTING_WEIGHT = 0.1  # share of the setting (the background's texture): a detail to judges
# "next to" and left/right of are neither the same nor opposite: half agreement.
_HORIZONTAL = {"left of", "right of", "next to"}


def object_similarity(a: SceneObject, b: SceneObject) -> float:
    """1 for the same shape, colour and size; partial credit per shared attribute."""
    return (
        _SHAPE_WEIGHT * (a.shape == b.shape)
        + _COLOUR_WEIGHT * (a.colour == b.colour)
        + _SIZE_WEIGHT * (a.size == b.size)
    )


def _relation_agreement(first: str, second: str) -> float:
    if first == second:
        return 1.0
    if {first, second} <= _HORIZONTAL and "next to" in (first, second):
        return 0.5
    return 0.0


def _overlap_for(a: Scene, b: Scene, matching: dict[int, int]) -> float:
    """Overlap when ``a.objects[i]`` is matched to ``b.objects[matching[i]]``."""
    most = max(len(a.objects), len(b.objects))
    objects = sum(object_similarity(a.objects[i], b.objects[j]) for i, j in matching.items())
    object_score = objects / most
    pairs = most * (most - 1) // 2
    if pairs == 0:
        return object_score
    agreement = 0.0
    for i, k in itertools.combinations(sorted(matching), 2):
        agreement += _relation_agreement(a.relation(i, k), b.relation(matching[i], matching[k]))
    return (1 - _RELATION_WEIGHT) * object_score + _RELATION_WEIGHT * agreement / pairs


def content_overlap(a: Scene, b: Scene) -> float:
    """Symmetric content overlap in [0, 1] under the best one-to-one object matching,
    with the setting counting for ``SETTING_WEIGHT``."""
    if len(a.objects) > len(b.objects):
        a, b = b, a
    best = 0.0
    for chosen in itertools.permutations(range(len(b.objects)), len(a.objects)):
        best = max(best, _overlap_for(a, b, dict(enumerate(chosen))))
    setting = float(a.background.texture == b.background.texture)
    return (1 - SETTING_WEIGHT) * best + SETTING_WEIGHT * setting


def entailment_label(a: Scene, b: Scene) -> str:
    """A simple SICK-style label: the same content entails; the same shapes with a
    conflicting colour, size or relation contradict; anything else is neutral."""
    overlap = content_overlap(a, b)
    if overlap >= 0.999:
        return "ENTAILMENT"
    shared = {o.shape for o in a.objects} & {o.shape for o in b.objects}
    if overlap >= 0.5 and shared:
        return "CONTRADICTION"
    return "NEUTRAL"


def _free_cell(scene: Scene, rng: random.Random) -> tuple[float, float]:
    taken = {(min(int(o.x * 3), 2), min(int(o.y * 3), 2)) for o in scene.objects}
    free = [(cx, cy) for cx in range(3) for cy in range(3) if (cx, cy) not in taken]
    cx, cy = rng.choice(free)
    return round((cx + 0.5) / 3 + rng.uniform(-0.05, 0.05), 3), round(
        (cy + 0.5) / 3 + rng.uniform(-0.05, 0.05), 3
    )


_SWAPPED = {"swap colours": ("colour",), "swap sizes": ("size",), "swap places": ("x", "y")}


def _edit(scene: Scene, rng: random.Random) -> Scene:
    """``scene`` with one random change of content (never of the background alone)."""
    objects = list(scene.objects)
    kinds = ["colour", "shape", "size", "move"]
    if len(objects) < MAX_OBJECTS:
        kinds.append("add")
    if len(objects) > 1:
        # SICK's argument swaps: the same words, bound to other objects
        kinds += ["remove", "swap colours", "swap sizes", "swap places"]
    kind = rng.choice(kinds)
    k = rng.randrange(len(objects))
    obj = objects[k]
    if kind.startswith("swap"):
        j = rng.choice([i for i in range(len(objects)) if i != k])
        fields = _SWAPPED[kind]
        objects[k] = replace(obj, **{f: getattr(objects[j], f) for f in fields})
        objects[j] = replace(objects[j], **{f: getattr(obj, f) for f in fields})
    elif kind == "colour":
        objects[k] = replace(obj, colour=rng.choice([c for c in COLOUR_NAMES if c != obj.colour]))
    elif kind == "shape":
        used = {o.shape for o in objects}
        objects[k] = replace(obj, shape=rng.choice([s for s in SHAPES if s not in used]))
    elif kind == "size":
        objects[k] = replace(obj, size=rng.choice([s for s in SIZES if s != obj.size]))
    elif kind == "move":
        x, y = _free_cell(scene, rng)
        objects[k] = replace(obj, x=x, y=y)
    elif kind == "add":
        used = {o.shape for o in objects}
        x, y = _free_cell(scene, rng)
        shape = rng.choice([s for s in SHAPES if s not in used])
        objects.append(SceneObject(shape, rng.choice(COLOUR_NAMES), rng.choice(SIZES), x, y))
    else:
        del objects[k]
    return replace(scene, objects=tuple(objects))


def swapped(scene: Scene, rng: random.Random) -> Scene:
    """``scene`` (of two or more objects) with two objects' colours, sizes or places
    exchanged: the words that describe it stay, bound to other objects."""
    objects = list(scene.objects)
    k, j = rng.sample(range(len(objects)), 2)
    fields = _SWAPPED[rng.choice(tuple(_SWAPPED))]
    objects[k] = replace(scene.objects[k], **{f: getattr(scene.objects[j], f) for f in fields})
    objects[j] = replace(scene.objects[j], **{f: getattr(scene.objects[k], f) for f in fields})
    return replace(scene, objects=tuple(objects))


def edited(scene: Scene, edits: int, rng: random.Random) -> Scene:
    """``scene`` after ``edits`` random content changes."""
    for _ in range(edits):
        scene = _edit(scene, rng)
    return scene
