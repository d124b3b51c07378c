"""Scenes of the embedded grounded world: a few coloured shapes on a textured background.

A scene holds 1-3 objects, each with a shape, a colour, a size and a position in the
unit square (``x`` to the right, ``y`` downwards, as in image coordinates), plus a
background: a colour, a texture and up to ``MAX_CLUTTER`` small items of clutter.
Captions describe the objects and their spatial relations, sometimes the background's
texture (the setting), never the clutter: it is content that the image features carry
and no caption explains, as a photograph's CNN features carry far more than its
captions mention. Shapes and colours are Zipf-distributed (``zipf``), as the things
photographs show are: a few are common, most are rare.

Scenes are generated in bulk with numpy (:func:`generate_scene_arrays`) because the
COCO-sized world has 123,287 of them; :class:`Scene` is the per-scene view used by the
caption writer and stored (as :meth:`Scene.to_dict`) beside each image in the JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

SHAPES: tuple[str, ...] = (
    "circle", "square", "triangle", "star", "cross", "diamond", "heart", "hexagon",
)  # fmt: skip
COLOURS: dict[str, tuple[int, int, int]] = {  # saturated, so they stand out from backgrounds
    "red": (220, 30, 35),
    "orange": (245, 135, 20),
    "yellow": (240, 215, 30),
    "green": (35, 165, 60),
    "blue": (40, 80, 225),
    "purple": (135, 45, 180),
    "pink": (245, 115, 185),
    "brown": (125, 75, 30),
}
COLOUR_NAMES: tuple[str, ...] = tuple(COLOURS)
SIZES: tuple[str, ...] = ("small", "medium", "large")
SIZE_RADIUS: tuple[float, ...] = (0.075, 0.11, 0.15)  # half-width as a fraction of the image
TEXTURES: tuple[str, ...] = ("plain", "stripes", "checks", "dots", "grain")
TEXTURE_VARIANTS = 4  # orientation/phase variants of each texture
RELATIONS: tuple[str, ...] = ("left of", "right of", "above", "below", "next to")
MAX_OBJECTS = 3
CLUTTER_KINDS = 12  # kinds of small things nobody mentions (pebbles, leaves, specks)
MAX_CLUTTER = 6  # items of clutter per scene: 0 to this many, uniformly
_OBJECT_COUNT_P = (0.2, 0.4, 0.4)  # probability of 1, 2, 3 objects
ZIPF_EXPONENT = 1.0  # shapes and colours are Zipf-distributed, as the things photos show are
_GRID = 3  # objects sit in distinct cells of a 3x3 grid, so they rarely overlap
_JITTER = 0.05  # how far an object may stray from its cell centre
_NEAR = 0.45  # same-row objects closer than this are "next to" each other
_SAME_ROW = 0.12


@dataclass(frozen=True)
class SceneObject:
    """One shape in a scene."""

    shape: str  # one of SHAPES
    colour: str  # one of COLOURS
    size: str  # one of SIZES
    x: float  # centre, 0 = left edge, 1 = right edge (3 decimals)
    y: float  # centre, 0 = top edge, 1 = bottom edge (3 decimals)


@dataclass(frozen=True)
class Clutter:
    """A small thing in the picture that no caption mentions."""

    kind: int  # 0 .. CLUTTER_KINDS - 1
    x: float  # centre in the unit square (3 decimals), as for objects
    y: float


@dataclass(frozen=True)
class Background:
    """What surrounds the objects: drawn and featurised; captions name its texture now
    and then (the setting), never its clutter."""

    colour: tuple[int, int, int]  # RGB, muted so objects stand out
    texture: str  # one of TEXTURES
    variant: int  # 0 .. TEXTURE_VARIANTS - 1: orientation/phase of the texture
    clutter: tuple[Clutter, ...] = ()


def zipf(count: int, exponent: float = ZIPF_EXPONENT) -> np.ndarray:
    """Probabilities proportional to 1 / rank ** exponent over ``count`` ranks (the first
    shape and colour in SHAPES and COLOURS are the commonest)."""
    weights = 1.0 / np.arange(1, count + 1) ** exponent
    return weights / weights.sum()


def relation_codes(dx: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """Index into RELATIONS of "A <relation> B" where ``(dx, dy)`` = B's centre - A's.

    Works elementwise on arrays of any shape (the feature projection uses it);
    :func:`relation_code` is the same rule for one pair, without numpy's overhead.
    """
    horizontal = np.abs(dx) >= np.abs(dy)
    near = (np.abs(dy) < _SAME_ROW) & (np.abs(dx) < _NEAR)
    codes = np.where(horizontal, np.where(dx > 0, 0, 1), np.where(dy > 0, 2, 3))
    return np.where(near, 4, codes)


def relation_code(dx: float, dy: float) -> int:
    """:func:`relation_codes` for one pair of plain floats."""
    if abs(dy) < _SAME_ROW and abs(dx) < _NEAR:
        return 4
    if abs(dx) >= abs(dy):
        return 0 if dx > 0 else 1
    return 2 if dy > 0 else 3


@dataclass(frozen=True)
class Scene:
    """A scene: its objects (1-3, distinct shapes) and its background."""

    objects: tuple[SceneObject, ...]
    background: Background

    def relation(self, first: int, second: int) -> str:
        """How ``objects[first]`` lies relative to ``objects[second]``."""
        a, b = self.objects[first], self.objects[second]
        return RELATIONS[relation_code(b.x - a.x, b.y - a.y)]

    def to_dict(self) -> dict[str, Any]:
        """A small JSON-able form; :meth:`from_dict` inverts it exactly."""
        return {
            "objects": [
                {"shape": o.shape, "colour": o.colour, "size": o.size, "x": o.x, "y": o.y}
                for o in self.objects
            ],
            "background": {
                "colour": list(self.background.colour),
                "texture": self.background.texture,
                "variant": self.background.variant,
                "clutter": [[c.kind, c.x, c.y] for c in self.background.clutter],
            },
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Scene:
        """Parse :meth:`to_dict`'s form; a ``ValueError`` names the offending field."""
        if not isinstance(raw, Mapping):
            raise ValueError(f"scene: expected an object, got {type(raw).__name__}")
        objects = raw.get("objects")
        if not isinstance(objects, list) or not 1 <= len(objects) <= MAX_OBJECTS:
            raise ValueError(f"scene.objects: expected a list of 1-{MAX_OBJECTS} objects")
        parsed = tuple(_parse_object(o, f"scene.objects[{k}]") for k, o in enumerate(objects))
        return cls(parsed, _parse_background(raw.get("background")))


def _choice(raw: Mapping[str, Any], key: str, allowed: tuple[str, ...], where: str) -> str:
    value = raw.get(key)
    if value not in allowed:
        raise ValueError(f"{where}.{key}: expected one of {list(allowed)}, got {value!r}")
    return str(value)


def _unit(raw: Mapping[str, Any], key: str, where: str) -> float:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"{where}.{key}: expected a number in [0, 1], got {value!r}")
    return float(value)


def _parse_object(raw: Any, where: str) -> SceneObject:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected an object, got {type(raw).__name__}")
    return SceneObject(
        shape=_choice(raw, "shape", SHAPES, where),
        colour=_choice(raw, "colour", COLOUR_NAMES, where),
        size=_choice(raw, "size", SIZES, where),
        x=_unit(raw, "x", where),
        y=_unit(raw, "y", where),
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_background(raw: Any) -> Background:
    where = "scene.background"
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected an object, got {type(raw).__name__}")
    colour = raw.get("colour")
    if not (
        isinstance(colour, list)
        and len(colour) == 3
        and all(_is_int(c) and 0 <= c <= 255 for c in colour)
    ):
        raise ValueError(f"{where}.colour: expected three integers 0-255, got {colour!r}")
    variant = raw.get("variant")
    if (
        not isinstance(variant, int)
        or isinstance(variant, bool)
        or not 0 <= variant < TEXTURE_VARIANTS
    ):
        raise ValueError(
            f"{where}.variant: expected an integer 0-{TEXTURE_VARIANTS - 1}, got {variant!r}"
        )
    r, g, b = colour
    clutter = _parse_clutter(raw.get("clutter", []), f"{where}.clutter")
    return Background((r, g, b), _choice(raw, "texture", TEXTURES, where), variant, clutter)


def _parse_clutter(raw: Any, where: str) -> tuple[Clutter, ...]:
    """``[[kind, x, y], ...]``, at most MAX_CLUTTER items (absent: none)."""
    if not isinstance(raw, list) or len(raw) > MAX_CLUTTER:
        raise ValueError(f"{where}: expected a list of at most {MAX_CLUTTER} [kind, x, y]")
    items = []
    for k, item in enumerate(raw):
        if not (isinstance(item, list) and len(item) == 3):
            raise ValueError(f"{where}[{k}]: expected [kind, x, y], got {item!r}")
        kind, x, y = item
        if not (_is_int(kind) and 0 <= kind < CLUTTER_KINDS):
            raise ValueError(f"{where}[{k}]: kind: expected 0-{CLUTTER_KINDS - 1}, got {kind!r}")
        for value in (x, y):
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise ValueError(f"{where}[{k}]: expected x and y in [0, 1], got {item!r}")
        items.append(Clutter(kind, float(x), float(y)))
    return tuple(items)


@dataclass(frozen=True)
class SceneArrays:
    """Many scenes as padded arrays (``MAX_OBJECTS`` slots; absent objects have shape -1)."""

    shape: np.ndarray  # (n, MAX_OBJECTS) int64 index into SHAPES, -1 = no object
    colour: np.ndarray  # (n, MAX_OBJECTS) int64 index into COLOUR_NAMES (0 when absent)
    size: np.ndarray  # (n, MAX_OBJECTS) int64 index into SIZES (0 when absent)
    x: np.ndarray  # (n, MAX_OBJECTS) float64 (0 when absent)
    y: np.ndarray  # (n, MAX_OBJECTS) float64 (0 when absent)
    background: np.ndarray  # (n, 3) int64 RGB
    texture: np.ndarray  # (n,) int64 index into TEXTURES
    variant: np.ndarray  # (n,) int64
    clutter: np.ndarray  # (n, MAX_CLUTTER) int64 kind, -1 = no item
    clutter_x: np.ndarray  # (n, MAX_CLUTTER) float64 (0 when absent)
    clutter_y: np.ndarray  # (n, MAX_CLUTTER) float64 (0 when absent)

    def __len__(self) -> int:
        return int(self.shape.shape[0])

    @property
    def present(self) -> np.ndarray:
        """(n, MAX_OBJECTS) bool: which slots hold an object."""
        return self.shape >= 0

    def scenes(self) -> list[Scene]:
        """Every row as a :class:`Scene`."""
        # Python lists first: indexing numpy scalars one by one is ~10x slower.
        rows = zip(
            self.shape.tolist(),
            self.colour.tolist(),
            self.size.tolist(),
            self.x.tolist(),
            self.y.tolist(),
            self.background.tolist(),
            self.texture.tolist(),
            self.variant.tolist(),
            self.clutter.tolist(),
            self.clutter_x.tolist(),
            self.clutter_y.tolist(),
            strict=True,
        )
        scenes: list[Scene] = []
        for shape, colour, size, x, y, (r, g, b), texture, variant, kinds, cx, cy in rows:
            objects = tuple(
                SceneObject(SHAPES[s], COLOUR_NAMES[c], SIZES[z], px, py)
                for s, c, z, px, py in zip(shape, colour, size, x, y, strict=True)
                if s >= 0
            )
            clutter = tuple(
                Clutter(k, px, py) for k, px, py in zip(kinds, cx, cy, strict=True) if k >= 0
            )
            background = Background((r, g, b), TEXTURES[texture], variant, clutter)
            scenes.append(Scene(objects, background))
        return scenes


def generate_scene_arrays(n: int, seed: int | np.random.SeedSequence) -> SceneArrays:
    """``n`` random scenes, fully determined by ``seed``."""
    if n < 0:
        raise ValueError(f"n: expected a non-negative number of scenes, got {n}")
    rng = np.random.default_rng(seed)
    count = rng.choice(np.arange(1, MAX_OBJECTS + 1), size=n, p=_OBJECT_COUNT_P)
    present = np.arange(MAX_OBJECTS)[None, :] < count[:, None]
    # Distinct shapes per scene keep "the circle" unambiguous in captions; drawn without
    # replacement in proportion to their Zipf weights (the Gumbel top-k trick).
    gumbel = -np.log(-np.log(rng.uniform(1e-12, 1.0, size=(n, len(SHAPES)))))
    shape = np.argsort(-(np.log(zipf(len(SHAPES))) + gumbel), axis=1)[:, :MAX_OBJECTS]
    colour = rng.choice(len(COLOURS), size=(n, MAX_OBJECTS), p=zipf(len(COLOURS)))
    size = rng.integers(0, len(SIZES), size=(n, MAX_OBJECTS))
    cell = np.argsort(rng.random((n, _GRID * _GRID)), axis=1)[:, :MAX_OBJECTS]
    jitter = rng.uniform(-_JITTER, _JITTER, size=(2, n, MAX_OBJECTS))
    # Rounded now, so that a scene read back from the JSON is the generated scene.
    x = np.round((cell % _GRID + 0.5) / _GRID + jitter[0], 3)
    y = np.round((cell // _GRID + 0.5) / _GRID + jitter[1], 3)
    grey = rng.uniform(70, 190, size=(n, 1))
    background = np.clip(np.round(grey + rng.uniform(-28, 28, size=(n, 3))), 0, 255)
    texture = rng.integers(0, len(TEXTURES), size=n).astype(np.int64)
    variant = rng.integers(0, TEXTURE_VARIANTS, size=n).astype(np.int64)
    items = np.arange(MAX_CLUTTER)[None, :] < rng.integers(0, MAX_CLUTTER + 1, size=n)[:, None]
    kinds = rng.integers(0, CLUTTER_KINDS, size=(n, MAX_CLUTTER))
    spots = np.round(rng.uniform(0.03, 0.97, size=(2, n, MAX_CLUTTER)), 3)
    return SceneArrays(
        shape=np.where(present, shape, -1).astype(np.int64),
        colour=np.where(present, colour, 0).astype(np.int64),
        size=np.where(present, size, 0).astype(np.int64),
        x=np.where(present, x, 0.0),
        y=np.where(present, y, 0.0),
        background=background.astype(np.int64),
        texture=texture,
        variant=variant,
        clutter=np.where(items, kinds, -1).astype(np.int64),
        clutter_x=np.where(items, spots[0], 0.0),
        clutter_y=np.where(items, spots[1], 0.0),
    )
