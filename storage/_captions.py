"""The longest caption a store may hold (``MAX_CAPTION_CHARS``), checked where captions
come in (``storage.build``: the source before anything is written, each shard before it
is written), where a store is verified (``storage.inspect``) and where training reads it
(``trainables.data``): training pads every caption of a split to the split's longest, one
byte per character (and the encoders' memory grows with it). The longest caption of the
paper's data sets is a few hundred characters, so a longer one is a broken source."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from storage._errors import StoreError

__all__ = ["MAX_CAPTION_CHARS", "check_caption_lengths"]

MAX_CAPTION_CHARS = 2_000


def check_caption_lengths(
    where: str,
    split: str,
    image_ids: Sequence[str] | np.ndarray,
    captions: Sequence[Sequence[str]] | np.ndarray,
) -> None:
    """Refuse ``captions`` (per image, aligned with ``image_ids``) of the split ``split``
    whose longest exceeds ``MAX_CAPTION_CHARS``, naming it and what padding every caption
    given to its length would cost."""
    longest, at, count = 0, (0, 0), 0
    for i, per_image in enumerate(captions):
        for k, caption in enumerate(per_image):
            count += 1
            if len(caption) > longest:
                longest, at = len(caption), (i, k)
    if longest <= MAX_CAPTION_CHARS:
        return
    image, k = image_ids[at[0]], at[1]
    cost = longest * count
    raise StoreError(
        f"{where}: caption {k} of image {image!r} in split {split!r} has {longest:,} "
        f"characters; captions are at most {MAX_CAPTION_CHARS:,} (padding the split's "
        f"{count:,} captions to it would take {_size(cost)} before the encoders' "
        "own memory): shorten it in the source and rebuild the store"
    )


def _size(count: int) -> str:
    """``count`` bytes in GiB, or MiB below one GiB."""
    return f"{count / 2**30:.1f} GiB" if count >= 2**30 else f"{count / 2**20:.1f} MiB"
