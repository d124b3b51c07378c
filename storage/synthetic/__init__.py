"""The embedded grounded world: a visually grounded data set generated on the spot.

Real data (Flickr8k, MSCOCO, SentEval) cannot be downloaded on every machine, so the
project generates its own: scenes of coloured shapes, drawn as PNG images, captioned
five times each in a Karpathy-format JSON, with image features from a fixed random
projection of each scene, and semantic similarity sets in SentEval's file layout whose
sentences use forms the training captions never do. It goes through the same ingestion
and evaluation code as the real data sets.

Example::

    from storage.synthetic import SceneProjectionExtractor, generate_world

    files = generate_world("/tmp/world", n_images=2000, seed=0)
    # files.dataset_json, files.images -> the ingestion (with SceneProjectionExtractor)
    # files.senteval -> storage.senteval.load_senteval
"""

from __future__ import annotations

from storage.synthetic._captions import (
    CAPTIONS_PER_IMAGE,
    MAX_CHARS,
    MIN_CHARS,
    add_typo,
    tokenize,
)
from storage.synthetic._features import SceneProjectionExtractor
from storage.synthetic._lexicon import HELD_OUT_FORMS, held_out_phrases, with_held_out_synonyms
from storage.synthetic._render import IMAGE_SIZE, RenderJob
from storage.synthetic._scenes import Scene, generate_scene_arrays
from storage.synthetic._semantic import STS_SUBTASKS
from storage.synthetic._similarity import content_overlap
from storage.synthetic._world import GENERATOR_VERSION, WorldFiles, generate_world, split_sizes

__all__ = [
    "CAPTIONS_PER_IMAGE",
    "GENERATOR_VERSION",
    "HELD_OUT_FORMS",
    "IMAGE_SIZE",
    "MAX_CHARS",
    "MIN_CHARS",
    "STS_SUBTASKS",
    "RenderJob",
    "Scene",
    "SceneProjectionExtractor",
    "WorldFiles",
    "add_typo",
    "content_overlap",
    "generate_scene_arrays",
    "generate_world",
    "held_out_phrases",
    "split_sizes",
    "tokenize",
    "with_held_out_synonyms",
]
