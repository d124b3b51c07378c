"""The feature store: Parquet shards of image features and captions, their manifest,
real-data ingestion (Karpathy JSON + ResNet-152), SentEval loaders and the embedded
grounded world. Free of Ray and MLflow, so every part runs on its own.

Example::

    >>> from storage import open_store                              # doctest: +SKIP
    >>> train = open_store("stores/world").read_split("train")      # doctest: +SKIP
    >>> train.features.shape, train.captions.shape                  # doctest: +SKIP
    ((1600, 2048), (1600, 5))
"""

from storage._atomic import write_bytes_atomic, write_text_atomic
from storage._build import build_karpathy, build_synthetic
from storage._captions import MAX_CAPTION_CHARS, check_caption_lengths
from storage._device import DeviceError, resolve, with_index
from storage._errors import StoreError
from storage._fs import Location
from storage._paths import is_temp_name
from storage._reader import FeatureStore, SplitData, open_store, read_split
from storage._schema import CAPTIONS_PER_IMAGE, SPLITS, Manifest, ShardInfo, SplitInfo
from storage._writer import StoreWriter

__all__ = [
    "CAPTIONS_PER_IMAGE",
    "MAX_CAPTION_CHARS",
    "SPLITS",
    "DeviceError",
    "FeatureStore",
    "Location",
    "Manifest",
    "ShardInfo",
    "SplitData",
    "SplitInfo",
    "StoreError",
    "StoreWriter",
    "build_karpathy",
    "build_synthetic",
    "check_caption_lengths",
    "is_temp_name",
    "open_store",
    "read_split",
    "resolve",
    "with_index",
    "write_bytes_atomic",
    "write_text_atomic",
]
