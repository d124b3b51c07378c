"""Decoding one image file into 8-bit RGB, whatever its mode, size or bit depth.

Only regular files are opened (``storage._files``): a FIFO, socket, directory or device
named like an image is refused before it is read, so it can never block a build.
"""

from __future__ import annotations

import os

import numpy as np
from PIL import Image

from storage._errors import StoreError
from storage._files import open_regular

__all__ = ["load_image_rgb"]


def load_image_rgb(path: str | os.PathLike[str]) -> Image.Image:
    """Decode ``path`` fully and return it as an 8-bit RGB image of the same size.

    Alpha is dropped, not composited (as torchvision's own ``pil_loader`` does); palette
    images with transparency go through RGBA so PIL does not warn. 16-bit greyscale is
    scaled by 255/65535; 32-bit integer greyscale (``I``) likewise when its values fit in
    16 bits, else min-max scaled; float greyscale (``F``) is scaled by 255 when in [0, 1],
    kept when in [0, 255], else min-max scaled. Decoding errors propagate (``OSError``,
    ``PIL.UnidentifiedImageError``, ...), and so does a path that is not a regular file
    (``storage._files.NotRegularFileError``); an unconvertible mode raises ``StoreError``.
    """
    with open_regular(path) as handle, Image.open(handle) as image:
        image.load()  # decode now, so a truncated file fails here rather than later
        mode = image.mode
        if mode == "RGB":
            return image.copy()
        if mode in ("I", "F") or mode.startswith("I;16"):
            return Image.fromarray(_greyscale_to_uint8(np.asarray(image), mode)).convert("RGB")
        try:
            if mode in ("PA", "LA") or (mode == "P" and "transparency" in image.info):
                return image.convert("RGBA").convert("RGB")
            return image.convert("RGB")
        except ValueError as exc:
            raise StoreError(f"{path}: cannot convert image mode {mode!r} to RGB ({exc})") from exc


def _greyscale_to_uint8(values: np.ndarray, mode: str) -> np.ndarray:
    """Scale a 16-bit, 32-bit integer or float greyscale array to 0..255 without saturating."""
    data = values.astype(np.float64)
    finite = np.isfinite(data)
    data[~finite] = 0.0
    low, high = (float(data.min()), float(data.max())) if data.size else (0.0, 0.0)
    if mode.startswith("I;16") or (mode == "I" and low >= 0 and high <= 65535):
        scaled = data * (255.0 / 65535.0)
    elif mode == "F" and low >= 0 and high <= 1:
        scaled = data * 255.0
    elif mode == "F" and low >= 0 and high <= 255:
        scaled = data
    else:  # values outside any known range: stretch what is there
        scaled = (data - low) * (255.0 / (high - low)) if high > low else np.zeros_like(data)
    return np.clip(np.rint(scaled), 0, 255).astype(np.uint8)
