"""Image features for the embedded world: a fixed random projection of each scene.

:class:`SceneProjectionExtractor` stands in for the pretrained CNN. It reads the scene
stored in each image's JSON entry (not the pixels) and maps it through a fixed random
non-linear network to a non-negative ``dim``-vector, like the post-ReLU, average-pooled
ResNet-152 features of real images:

1. each object: random embeddings of its shape, colour and size and of their pairwise
   interactions (an attribute looks different on different shapes), plus random
   Fourier features of its position, through a random ``tanh`` layer; summed over the
   objects;
2. each ordered pair of objects: a random embedding of (relation, shape, shape), as
   strong as an object's (what a picture shows includes how its things are arranged);
3. the background: its colour and texture, and its clutter (each item a random
   embedding of its kind plus its position's Fourier features, through ``tanh``);
4. a little Gaussian noise (the camera's), seeded by the image id alone, so a feature
   never depends on the batch it was computed in;
5. a random linear layer to ``dim`` dimensions and a ReLU.

So features separate scenes by what captions say (objects, attributes, relations,
sometimes the setting) and by much that they do not (the clutter above all, exact
positions, the background's colour). What keeps caption-to-image retrieval hard is
that content: it recurs across images, so an image encoder learns to look past it
rather than memorise it, and the ReLU entangles it with the rest, so it is never
removed entirely. Per-image noise would do the first job too, but an encoder can
memorise it on the training images, and then retrieval on unseen images falls while
training goes on (which real features do not do).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from storage._errors import StoreError
from storage._extractors import ImageItem
from storage.synthetic._scenes import (
    CLUTTER_KINDS,
    COLOUR_NAMES,
    MAX_CLUTTER,
    MAX_OBJECTS,
    RELATIONS,
    SHAPES,
    SIZES,
    TEXTURE_VARIANTS,
    TEXTURES,
    Scene,
    SceneArrays,
    relation_codes,
)

# Standard deviation of the camera's per-image noise in the scene code: small beside the
# clutter's code, so that no encoder can gain by memorising it.
DEFAULT_NOISE = 0.5
_HIDDEN = 256  # width of the scene code before the projection to ``dim``
_FOURIER = 16  # random Fourier features of an object's position
_RELATION_WEIGHT = 3.0  # scale of the pairwise relation code relative to the objects'
_BACKGROUND_WEIGHT = 2.0  # scale of the background's colour and texture code
# Scale of the clutter's code: with it, a ridge regression from the captions' character
# n-grams to the features reaches a dev R@10 mean near 40% on the default world and the
# trained CPU-sized model near 75% (BENCHMARKS.md, "The embedded world").
_CLUTTER_WEIGHT = 6.0
_ROWS_PER_CHUNK = 2048  # images featurised at a time
_PAIRS = tuple(itertools.permutations(range(MAX_OBJECTS), 2))


@dataclass(frozen=True)
class _Weights:
    """The fixed random network, drawn once from the extractor's seed."""

    shape: np.ndarray  # (len(SHAPES), H)
    colour: np.ndarray  # (len(COLOURS), H)
    size: np.ndarray  # (len(SIZES), H)
    shape_colour: np.ndarray  # (len(SHAPES) * len(COLOURS), H) interaction embeddings
    shape_size: np.ndarray  # (len(SHAPES) * len(SIZES), H)
    colour_size: np.ndarray  # (len(COLOURS) * len(SIZES), H)
    fourier: np.ndarray  # (2, _FOURIER) position frequencies
    phase: np.ndarray  # (_FOURIER,)
    position: np.ndarray  # (_FOURIER, H)
    object_layer: np.ndarray  # (H, H)
    relation: np.ndarray  # (len(RELATIONS), H)
    relation_first: np.ndarray  # (len(SHAPES), H)
    relation_second: np.ndarray  # (len(SHAPES), H)
    background: np.ndarray  # (3 + len(TEXTURES) + TEXTURE_VARIANTS, H)
    clutter: np.ndarray  # (CLUTTER_KINDS, H)
    output: np.ndarray  # (H, dim) float32
    output_bias: np.ndarray  # (dim,) float32


def _draw_weights(dim: int, seed: int) -> _Weights:
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5CE7E]))
    h, n_shape, n_colour, n_size = _HIDDEN, len(SHAPES), len(COLOUR_NAMES), len(SIZES)

    def table(rows: int, scale: float) -> np.ndarray:
        return rng.normal(0.0, scale, size=(rows, h))

    return _Weights(
        shape=table(n_shape, 1.0),
        colour=table(n_colour, 1.0),
        size=table(n_size, 0.8),
        shape_colour=table(n_shape * n_colour, 1.5),
        shape_size=table(n_shape * n_size, 1.2),
        colour_size=table(n_colour * n_size, 1.2),
        fourier=rng.normal(0.0, 1.5, size=(2, _FOURIER)),
        phase=rng.uniform(0.0, 2 * np.pi, size=_FOURIER),
        position=table(_FOURIER, 0.5),
        object_layer=rng.normal(0.0, 1.0 / np.sqrt(h), size=(h, h)),
        relation=table(len(RELATIONS), 1.0),
        relation_first=table(n_shape, 0.5),
        relation_second=table(n_shape, 0.5),
        background=table(3 + len(TEXTURES) + TEXTURE_VARIANTS, 0.8),
        clutter=table(CLUTTER_KINDS, 1.0),
        output=rng.normal(0.0, 1.0 / np.sqrt(h), size=(h, dim)).astype(np.float32),
        output_bias=rng.normal(0.1, 0.3, size=dim).astype(np.float32),
    )


@dataclass(frozen=True)
class _Tables:
    """The network folded into lookup tables (float32), so that a scene code costs a
    few gathers, one small matrix product and one ``tanh`` per object."""

    attributes: np.ndarray  # (shapes * colours * sizes, H): object pre-activation part
    position: np.ndarray  # (_FOURIER, H): position features through the object layer
    fourier: np.ndarray  # (2, _FOURIER)
    phase: np.ndarray  # (_FOURIER,)
    pairs: np.ndarray  # (relations * shapes * shapes, H): tanh of each pair's code
    background: np.ndarray  # (3 + len(TEXTURES) + TEXTURE_VARIANTS, H)
    clutter: np.ndarray  # (CLUTTER_KINDS, H)


def _fold(w: _Weights) -> _Tables:
    grid = np.meshgrid(
        np.arange(len(SHAPES)), np.arange(len(COLOUR_NAMES)), np.arange(len(SIZES)), indexing="ij"
    )
    s, c, z = (g.ravel() for g in grid)  # row = (s * colours + c) * sizes + z
    embedded = (
        w.shape[s]
        + w.colour[c]
        + w.size[z]
        + w.shape_colour[s * len(COLOUR_NAMES) + c]
        + w.shape_size[s * len(SIZES) + z]
        + w.colour_size[c * len(SIZES) + z]
    )
    r, first, second = np.meshgrid(
        np.arange(len(RELATIONS)), np.arange(len(SHAPES)), np.arange(len(SHAPES)), indexing="ij"
    )  # row = (r * shapes + first) * shapes + second
    pairs = np.tanh(
        w.relation[r.ravel()] + w.relation_first[first.ravel()] + w.relation_second[second.ravel()]
    )
    f32 = np.float32
    return _Tables(
        attributes=(embedded @ w.object_layer).astype(f32),
        position=(w.position @ w.object_layer).astype(f32),
        fourier=(2 * np.pi * w.fourier).astype(f32),
        phase=w.phase.astype(f32),
        pairs=(_RELATION_WEIGHT * pairs).astype(f32),
        background=w.background.astype(f32),
        clutter=w.clutter.astype(f32),
    )


def scene_code(scenes: SceneArrays, tables: _Tables) -> np.ndarray:
    """The noiseless (n, _HIDDEN) float32 code of each scene (steps 1-3 of the module
    docstring)."""
    present = scenes.present
    shape = np.maximum(scenes.shape, 0)  # absent slots are masked out below
    n_colour, n_size, n_shape = len(COLOUR_NAMES), len(SIZES), len(SHAPES)
    rows = (shape * n_colour + scenes.colour) * n_size + scenes.size
    xy = np.stack([scenes.x, scenes.y], axis=-1).astype(np.float32)
    fourier = np.cos(xy.reshape(-1, 2) @ tables.fourier + tables.phase)  # 2-D: BLAS path
    pre = tables.attributes[rows] + (fourier @ tables.position).reshape(*rows.shape, -1)
    code = (np.tanh(pre) * present[..., None]).sum(axis=1)  # (n, H)
    for first, second in _PAIRS:
        both = present[:, first] & present[:, second]
        relation = relation_codes(
            scenes.x[:, second] - scenes.x[:, first], scenes.y[:, second] - scenes.y[:, first]
        )
        pair_rows = (relation * n_shape + shape[:, first]) * n_shape + shape[:, second]
        code += tables.pairs[pair_rows] * both[:, None]
    background = np.concatenate(
        [
            scenes.background / 128.0 - 1.0,
            np.eye(len(TEXTURES))[scenes.texture],
            np.eye(TEXTURE_VARIANTS)[scenes.variant],
        ],
        axis=1,
        dtype=np.float32,
    )
    code += _BACKGROUND_WEIGHT * np.tanh(background @ tables.background)
    items = scenes.clutter >= 0
    spots = np.stack([scenes.clutter_x, scenes.clutter_y], axis=-1).astype(np.float32)
    where = np.cos(spots.reshape(-1, 2) @ tables.fourier + tables.phase) @ tables.position
    pre = tables.clutter[np.maximum(scenes.clutter, 0)] + where.reshape(*items.shape, -1)
    code += _CLUTTER_WEIGHT * (np.tanh(pre) * items[..., None]).sum(axis=1)
    return code


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijection of uint64 whose outputs look independent."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def image_noise(image_ids: Sequence[str], seed: int, width: int) -> np.ndarray:
    """(n, width) float32 standard normal noise; row i depends only on ``image_ids[i]``
    and ``seed``, never on the other ids in the batch.

    A counter-based generator (hash of the id, SplitMix64 over the column counter,
    Box-Muller) is vectorised over the batch; a seeded generator per image costs more
    than all the rest of the projection.
    """
    keys = np.array(
        [
            int.from_bytes(
                hashlib.blake2b(f"{seed}/{i}".encode(), digest_size=8).digest(), "little"
            )
            for i in image_ids
        ],
        dtype=np.uint64,
    )
    pairs = (width + 1) // 2
    counters = (np.arange(1, pairs + 1, dtype=np.uint64) * _GOLDEN)[None, :]
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps by design
        bits = _mix64(keys[:, None] + counters)
    # Two 24-bit uniforms per 64-bit word; u1 in (0, 1] keeps the logarithm finite.
    scale = np.float32(1.0 / (1 << 24))
    u1 = ((bits >> np.uint64(40)).astype(np.float32) + np.float32(1.0)) * scale
    u2 = (bits & np.uint64(0xFFFFFF)).astype(np.float32) * scale
    radius = np.sqrt(np.float32(-2.0) * np.log(u1))
    angle = np.float32(2 * np.pi) * u2
    noise = np.concatenate([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    return noise[:, :width]


_SHAPE_INDEX = {name: k for k, name in enumerate(SHAPES)}
_COLOUR_INDEX = {name: k for k, name in enumerate(COLOUR_NAMES)}
_SIZE_INDEX = {name: k for k, name in enumerate(SIZES)}
_TEXTURE_INDEX = {name: k for k, name in enumerate(TEXTURES)}


def _fill_row(arrays: SceneArrays, row: int, raw: Mapping[str, Any]) -> None:
    """Copy one scene dict into ``arrays``; any malformation raises (see ``scene_arrays``)."""
    objects = raw["objects"]
    if not 1 <= len(objects) <= MAX_OBJECTS:
        raise ValueError("bad object count")
    for k, obj in enumerate(objects):
        arrays.shape[row, k] = _SHAPE_INDEX[obj["shape"]]
        arrays.colour[row, k] = _COLOUR_INDEX[obj["colour"]]
        arrays.size[row, k] = _SIZE_INDEX[obj["size"]]
        x, y = obj["x"], obj["y"]
        if not (type(x) in (int, float) and type(y) in (int, float) and 0 <= x <= 1 >= y >= 0):
            raise ValueError("bad position")
        arrays.x[row, k], arrays.y[row, k] = x, y
    background = raw["background"]
    colour, variant = background["colour"], background["variant"]
    if len(colour) != 3 or not all(type(c) is int and 0 <= c <= 255 for c in colour):
        raise ValueError("bad background colour")
    if type(variant) is not int or not 0 <= variant < TEXTURE_VARIANTS:
        raise ValueError("bad texture variant")
    arrays.background[row] = colour
    arrays.texture[row] = _TEXTURE_INDEX[background["texture"]]
    arrays.variant[row] = variant
    clutter = background.get("clutter", [])
    if len(clutter) > MAX_CLUTTER:
        raise ValueError("too much clutter")
    for k, (kind, x, y) in enumerate(clutter):
        if not (type(kind) is int and 0 <= kind < CLUTTER_KINDS):
            raise ValueError("bad clutter kind")
        if not (type(x) in (int, float) and type(y) in (int, float) and 0 <= x <= 1 >= y >= 0):
            raise ValueError("bad clutter position")
        arrays.clutter[row, k], arrays.clutter_x[row, k], arrays.clutter_y[row, k] = kind, x, y


def scene_arrays(items: Sequence[ImageItem]) -> SceneArrays:
    """The scenes stored in ``item.entry["scene"]``, packed for :func:`scene_code`.

    Parsing skips building :class:`Scene` objects (the COCO-sized world has 123,287);
    a malformed scene is re-parsed by :meth:`Scene.from_dict` for a precise message.
    """
    n = len(items)
    slots = (n, MAX_OBJECTS)
    arrays = SceneArrays(
        shape=np.full(slots, -1, dtype=np.int64),
        colour=np.zeros(slots, dtype=np.int64),
        size=np.zeros(slots, dtype=np.int64),
        x=np.zeros(slots),
        y=np.zeros(slots),
        background=np.zeros((n, 3), dtype=np.int64),
        texture=np.zeros(n, dtype=np.int64),
        variant=np.zeros(n, dtype=np.int64),
        clutter=np.full((n, MAX_CLUTTER), -1, dtype=np.int64),
        clutter_x=np.zeros((n, MAX_CLUTTER)),
        clutter_y=np.zeros((n, MAX_CLUTTER)),
    )
    for row, item in enumerate(items):
        raw = item.entry.get("scene")
        try:
            _fill_row(arrays, row, raw)  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            _raise_bad_scene(item, raw)
    return arrays


def _raise_bad_scene(item: ImageItem, raw: Any) -> None:
    if raw is None:
        raise StoreError(
            f"image {item.image_id!r}, field 'scene': missing; the scene-projection "
            "extractor needs the scene dict the embedded world stores in each JSON entry"
        ) from None
    try:
        Scene.from_dict(raw)
    except ValueError as err:
        raise StoreError(f"image {item.image_id!r}, field 'scene': {err}") from None
    raise StoreError(f"image {item.image_id!r}, field 'scene': malformed scene {raw!r}")


class SceneProjectionExtractor:
    """Features of embedded-world images from their stored scenes (see the module docstring).

    Example::

        extractor = SceneProjectionExtractor(dim=2048, seed=0)
        features, errors = extractor.extract(items)   # float32 (len(items), 2048), [None, ...]
    """

    def __init__(self, dim: int = 2048, seed: int = 0, noise: float = DEFAULT_NOISE) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim: expected a positive integer, got {dim!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise ValueError(f"seed: expected a non-negative integer below 2**63, got {seed!r}")
        if not noise >= 0:
            raise ValueError(f"noise: expected a non-negative standard deviation, got {noise!r}")
        self._dim = dim
        self._seed = seed
        self._noise = float(noise)
        self._weights = _draw_weights(dim, seed)
        self._tables = _fold(self._weights)

    @property
    def dim(self) -> int:
        return self._dim

    def describe(self) -> dict[str, Any]:
        return {
            "model": "scene-projection",
            "weights": "synthetic",
            "weights_sha256": None,
            "crops": None,
            "seed": self._seed,
            "noise": self._noise,
        }

    def extract(self, items: Sequence[ImageItem]) -> tuple[np.ndarray, list[str | None]]:
        """Features for ``items``; never fails per item (a bad scene raises StoreError)."""
        features = np.empty((len(items), self._dim), dtype=np.float32)
        # Chunks keep the intermediate arrays in cache: on large inputs, touching fresh
        # memory costs more than the arithmetic.
        for start in range(0, len(items), _ROWS_PER_CHUNK):
            chunk = items[start : start + _ROWS_PER_CHUNK]
            code = scene_code(scene_arrays(chunk), self._tables)
            if self._noise > 0:
                noise = image_noise([i.image_id for i in chunk], self._seed, _HIDDEN)
                code += np.float32(self._noise) * noise
            out = features[start : start + len(chunk)]
            np.matmul(code, self._weights.output, out=out)
            out += self._weights.output_bias
            np.maximum(out, 0.0, out=out)
        return features, [None] * len(items)
