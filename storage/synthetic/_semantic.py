"""The embedded world's semantic sets, written in SentEval's ``data/downstream`` layout.

``STS/STS1{2..6}-en-test/`` hold graded-similarity pairs whose subtask names say what
they test (training-like captions, typos, SentEval-style tokenisation, questions,
passives, negation, unseen templates and synonyms, long descriptions, a mix); ``SICK/`` and
``STS/STSBenchmark/`` hold the supervised relatedness tasks; ``suite.json`` lists them
for :func:`storage.senteval.load_suite`. Every sentence describes its whole scene, and
the gold score is the content overlap of the two scenes (0-5 for STS, 1-5 for SICK).

The scenes come from their own seed streams (one per set), never from the training
images, and each set is a function of the world seed and its own size only.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from storage._atomic import write_json_atomic, write_text_atomic
from storage.synthetic._captions import object_phrase
from storage.synthetic._phrasing import MIXABLE, denying, describe_scene
from storage.synthetic._scenes import (
    COLOUR_NAMES,
    SHAPES,
    SIZES,
    Scene,
    SceneObject,
    generate_scene_arrays,
)
from storage.synthetic._similarity import content_overlap, edited, entailment_label, swapped

logger = logging.getLogger(__name__)

SUITE_NAME = "grounded-world"
STS_SUBTASKS: dict[str, tuple[str, ...]] = {
    "STS12": ("captions", "typos", "synonyms"),
    "STS13": ("senteval-style", "relative-clauses", "word-order"),
    "STS14": ("questions", "passive", "negation"),
    "STS15": ("unseen-templates", "unseen-synonyms"),
    "STS16": ("long", "mixed"),
}
SUPERVISED = ("SICK-R", "STS-B")
_SEMANTIC_STREAM = 2  # seed-sequence branch of the semantic sets (0, 1: training world)
# Edits per pair: None = an unrelated scene. Same-scene pairs (0 edits) are paraphrases.
_PAIR_KINDS: tuple[int | None, ...] = (0, 0, 1, 1, 1, 1, 2, 2, 2, 3, 3, 4, None, None, None, None)
_DEFAULT_IMAGES = 2000  # the world size the default set sizes below are meant for


@dataclass(frozen=True)
class SemanticSizes:
    """How many pairs each semantic set has."""

    sts_pairs: int  # per STS12-16 subtask
    sick: tuple[int, int, int]  # SICK train, trial (dev), test
    stsb: tuple[int, int, int]  # STS-B train, dev, test


def _scaled(base: int, factor: float, low: int, high: int) -> int:
    return int(min(high, max(low, round(base * factor))))


def semantic_sizes(n_images: int) -> SemanticSizes:
    """Set sizes that grow with the world, between a floor that keeps correlations
    meaningful and the sizes of the real sets (docs/protocols.md section 4). The dev and
    test sets of SICK and STS-B reach the real ones' sizes (SICK trial 500 and test
    4,927, STS-B dev 1,500 and test 1,379) from 1,000 images on: with smaller dev sets
    the training seed, not the configuration, decides which trial is best, and smaller
    test sets leave intervals too wide to tell a model from a baseline."""
    f = n_images / _DEFAULT_IMAGES
    real = n_images / 1000
    return SemanticSizes(
        sts_pairs=_scaled(250, f, 60, 750),
        sick=(
            _scaled(1000, f, 100, 4500),
            _scaled(500, real, 40, 500),
            _scaled(4927, real, 100, 4927),
        ),
        stsb=(
            _scaled(1000, f, 100, 5749),
            _scaled(1500, real, 40, 1500),
            _scaled(1379, real, 100, 1379),
        ),
    )


@dataclass(frozen=True)
class ScenePair:
    """Two scenes, their sentences and their content overlap in [0, 1]."""

    first: Scene
    second: Scene
    sentence1: str
    sentence2: str
    overlap: float


def _stream_key(seed: int, name: str) -> int:
    """A stable integer for ``name`` (Python's ``hash`` of a str changes per process)."""
    digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def make_pairs(seed: int, name: str, count: int, style: str) -> list[ScenePair]:
    """``count`` graded pairs for the set ``name``, phrased in ``style``.

    Two styles build their pairs their own way, as SICK's authors built theirs by
    transforming sentences: ``word-order`` pairs a scene of two or three objects with
    itself described in another order ("A left of B" / "B right of A") or with two of
    its objects' colours, sizes or places swapped (the same words, bound otherwise);
    ``synonyms`` describes both scenes with the training captions' words, the first
    sentence with each thing's commonest word and the second with another one where
    there is one ("circle" / "disc", "large" / "big"); ``negation`` pairs a caption of a
    scene with a caption that ends by denying something, as SICK's "there is no ..."
    (:func:`_negated`). A ``mixed`` set (SICK-R, STS-B,
    STS16's mix) draws each pair's register (captions, a question, a passive, typos, ...)
    on its own and phrases both sentences in it: a real pair comes from one source (an
    STS-B pair from one genre's data set, a SICK pair from one caption and its
    transformation), so what its gold score grades is content, not a change of register."""
    key = _stream_key(seed, name)
    pool = generate_scene_arrays(3 * count, np.random.SeedSequence([seed, _SEMANTIC_STREAM, key]))
    scenes = pool.scenes()
    rng = random.Random(key)
    if style in ("word-order", "negation"):
        scenes = [scene for scene in scenes if len(scene.objects) >= 2]
    styles = ("commonest-words", "other-words") if style == "synonyms" else (style, style)
    pairs = []
    for k in range(count):
        first = scenes[2 * k]
        denied = None
        if style == "word-order":
            second = first if rng.random() < 0.4 else swapped(first, rng)
        elif style == "negation":
            second, denied = _negated(first, scenes[2 * k + 1], rng)
        else:
            second = _partner(first, scenes[2 * k + 1], rng)
        pair_styles = styles
        if style == "mixed":  # one register per pair, as a real pair comes from one source
            register = rng.choice(MIXABLE)
            pair_styles = (register, register)
        sentences = [
            describe_scene(first, pair_styles[0], rng),
            describe_scene(second, pair_styles[1], rng),
        ]
        if denied is not None:
            sentences[1] = denying(sentences[1], object_phrase(denied, rng)[0], rng)
        if style != "synonyms":
            rng.shuffle(sentences)  # the edited scene is not always second
        overlap = content_overlap(first, second)
        pairs.append(ScenePair(first, second, sentences[0], sentences[1], overlap))
    return pairs


def _partner(first: Scene, unrelated: Scene, rng: random.Random) -> Scene:
    """The scene ``first`` is compared with: itself (a paraphrase), an edited copy in
    another setting (another picture of much the same things), or ``unrelated``."""
    kind = rng.choice(_PAIR_KINDS)
    if kind is None:
        return unrelated
    if kind == 0:
        return first
    return replace(edited(first, kind, rng), background=unrelated.background)


def _negated(first: Scene, other: Scene, rng: random.Random) -> tuple[Scene, SceneObject]:
    """The second scene of a negation pair and the thing its sentence denies. Half the
    time one of ``first``'s objects is taken out of the picture and denied ("a red circle
    left of a blue square" / "a blue square, but there is no red circle": nearly the same
    words, less of the content); otherwise the scene stays (or is edited once or twice)
    and the sentence denies a shape neither scene holds (more words, the same content).
    A scene's shapes are distinct, so the denial is true of the second scene."""
    if rng.random() < 0.5:
        objects = list(first.objects)
        denied = objects.pop(rng.randrange(len(objects)))
        return replace(first, objects=tuple(objects)), denied
    second = first if rng.random() < 0.5 else edited(first, rng.choice((1, 2)), rng)
    present = {o.shape for o in (*first.objects, *second.objects)}
    strangers = [o for o in other.objects if o.shape not in present]
    if strangers:
        return second, rng.choice(strangers)
    shape = rng.choice([s for s in SHAPES if s not in present])
    return second, SceneObject(shape, rng.choice(COLOUR_NAMES), rng.choice(SIZES), 0.5, 0.5)


def _sts_files(pairs: list[ScenePair]) -> tuple[str, str]:
    inputs = "".join(f"{p.sentence1}\t{p.sentence2}\n" for p in pairs)
    gold = "".join(f"{5 * p.overlap:.3f}\n" for p in pairs)
    return inputs, gold


def _sick_file(pairs: list[ScenePair], first_id: int) -> str:
    lines = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"]
    for k, p in enumerate(pairs):
        label = entailment_label(p.first, p.second)
        score = 1 + 4 * p.overlap
        lines.append(f"{first_id + k}\t{p.sentence1}\t{p.sentence2}\t{score:.3f}\t{label}\n")
    return "".join(lines)


def _stsb_file(pairs: list[ScenePair], split: str) -> str:
    return "".join(
        f"main-captions\tgrounded-world\t{split}\t{k:04d}\t{5 * p.overlap:.3f}\t"
        f"{p.sentence1}\t{p.sentence2}\n"
        for k, p in enumerate(pairs)
    )


def write_semantic_sets(
    out_dir: str | os.PathLike[str], seed: int, sizes: SemanticSizes
) -> dict[str, int]:
    """Write every set and ``suite.json`` under ``out_dir``; returns pairs per set.

    The dev sets (SICK trial, STS-B dev) select models, so none of their pairs may be a
    reported one: a dev pair that also occurs (in either order) in STS12-16 or a test
    split is left out of its dev set (at the default sizes none does)."""
    root = Path(out_dir)
    counts: dict[str, int] = {}
    sts = {
        (year, subtask): make_pairs(seed, f"{year}/{subtask}", sizes.sts_pairs, subtask)
        for year, subtasks in STS_SUBTASKS.items()
        for subtask in subtasks
    }
    sick_names = ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt")
    sick = [
        make_pairs(seed, f"SICK/{filename}", count, "mixed")
        for filename, count in zip(sick_names, sizes.sick, strict=True)
    ]
    stsb = [
        make_pairs(seed, f"STS-B/{split}", count, "mixed")
        for split, count in zip(("train", "dev", "test"), sizes.stsb, strict=True)
    ]
    reported = {_pair_key(p) for pairs in (*sts.values(), sick[2], stsb[2]) for p in pairs}
    sick[1], stsb[1] = (_without(dev, reported) for dev in (sick[1], stsb[1]))
    for (year, subtask), pairs in sts.items():
        inputs, gold = _sts_files(pairs)
        folder = root / "STS" / f"{year}-en-test"
        write_text_atomic(folder / f"STS.input.{subtask}.txt", inputs)
        write_text_atomic(folder / f"STS.gs.{subtask}.txt", gold)
        counts[f"{year}/{subtask}"] = len(pairs)
    first_id = 1
    for filename, pairs in zip(sick_names, sick, strict=True):
        write_text_atomic(root / "SICK" / filename, _sick_file(pairs, first_id))
        first_id += len(pairs)
        counts[f"SICK-R/{filename}"] = len(pairs)
    for split, pairs in zip(("train", "dev", "test"), stsb, strict=True):
        write_text_atomic(
            root / "STS" / "STSBenchmark" / f"sts-{split}.csv", _stsb_file(pairs, split)
        )
        counts[f"STS-B/{split}"] = len(pairs)
    suite = {
        "name": SUITE_NAME,
        "sts": {year: list(subtasks) for year, subtasks in STS_SUBTASKS.items()},
        "supervised": list(SUPERVISED),
    }
    write_json_atomic(root / "suite.json", suite)
    logger.info("wrote semantic sets under %s: %s", root, asdict(sizes))
    return counts


def _pair_key(pair: ScenePair) -> frozenset[str]:
    return frozenset((pair.sentence1, pair.sentence2))


def _without(dev: list[ScenePair], reported: set[frozenset[str]]) -> list[ScenePair]:
    kept = [p for p in dev if _pair_key(p) not in reported]
    if len(kept) < len(dev):
        logger.info("left %d dev pair(s) out: they also occur in a test set", len(dev) - len(kept))
    return kept
