"""Drawing scenes as small RGB PNG images.

The images are real files that PIL (and the ResNet extractor) can open, so the embedded
world exercises the same directory layout and file checks as Flickr8k or MSCOCO. The
scene-projection extractor does not look at the pixels, so the drawing only has to be
faithful, not photo-realistic.

Rendering the COCO-sized world means 123,287 files: they are drawn by a small process
pool, each written under a temporary name and renamed into place (a reader never sees
half a PNG), and files that already exist are skipped, so an interrupted run resumes.
"""

from __future__ import annotations

import io
import logging
import math
import multiprocessing
import os
import signal
from collections.abc import Sequence
from functools import cache
from multiprocessing.pool import AsyncResult, Pool
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from storage.synthetic._scenes import (
    COLOURS,
    SHAPES,
    SIZE_RADIUS,
    SIZES,
    TEXTURES,
    Scene,
)

logger = logging.getLogger(__name__)

IMAGE_SIZE = 64  # pixels per side
_TEXTURE_AMPLITUDE = 24.0  # how far a texture moves the background colour (0-255 scale)
_CLUTTER_SHADES = ((90, 90, 80), (60, 55, 50), (150, 145, 130), (110, 100, 70))
_CHUNK = 512  # scenes per pool task: large enough to amortise pickling


def _unit_polygon(shape: str) -> list[tuple[float, float]]:
    """Vertices of ``shape`` inside the unit disc, centred on the origin (y downwards)."""
    if shape == "square":
        return [(-0.8, -0.8), (0.8, -0.8), (0.8, 0.8), (-0.8, 0.8)]
    if shape == "triangle":
        return [(0.0, -1.0), (0.87, 0.5), (-0.87, 0.5)]
    if shape == "diamond":
        return [(0.0, -1.0), (0.7, 0.0), (0.0, 1.0), (-0.7, 0.0)]
    if shape == "hexagon":
        return [(math.cos(a), math.sin(a)) for a in np.linspace(0, 2 * math.pi, 7)[:-1]]
    if shape == "star":
        angles = np.linspace(-math.pi / 2, 1.5 * math.pi, 11)[:-1]
        radii = [1.0 if k % 2 == 0 else 0.42 for k in range(10)]
        return [(r * math.cos(a), r * math.sin(a)) for r, a in zip(radii, angles, strict=True)]
    if shape == "cross":
        w = 0.33
        return [
            (-w, -1), (w, -1), (w, -w), (1, -w), (1, w), (w, w),
            (w, 1), (-w, 1), (-w, w), (-1, w), (-1, -w), (-w, -w),
        ]  # fmt: skip
    if shape == "heart":
        t = np.linspace(0, 2 * math.pi, 24, endpoint=False)
        hx = 16 * np.sin(t) ** 3
        hy = -(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t))
        return [(float(a) / 17, float(b) / 17 + 0.1) for a, b in zip(hx, hy, strict=True)]
    raise ValueError(f"shape: no polygon for {shape!r}")


# Circles are drawn as ellipses; every other shape as a polygon.
_POLYGONS: dict[str, list[tuple[float, float]]] = {
    s: _unit_polygon(s) for s in SHAPES if s != "circle"
}


@cache
def _texture(texture: str, variant: int) -> np.ndarray:
    """A fixed (IMAGE_SIZE, IMAGE_SIZE, 1) pattern in [-1, 1] for ``texture``/``variant``."""
    rows, cols = np.mgrid[0:IMAGE_SIZE, 0:IMAGE_SIZE].astype(np.float64)
    period = 6 + 2 * variant
    if texture == "plain":
        pattern = np.zeros_like(rows)
    elif texture == "stripes":  # variants alternate vertical/horizontal, with their period
        axis = cols if variant % 2 == 0 else rows
        pattern = np.sign(np.sin(2 * math.pi * axis / period))
    elif texture == "checks":
        pattern = np.sign(np.sin(math.pi * rows / period) * np.sin(math.pi * cols / period))
    elif texture == "dots":
        dist = np.hypot(rows % period - period / 2, cols % period - period / 2)
        pattern = np.where(dist < period / 4, 1.0, -0.2)
    elif texture == "grain":
        pattern = np.random.default_rng(1000 + variant).uniform(-1, 1, rows.shape)
    else:
        raise ValueError(f"texture: expected one of {list(TEXTURES)}, got {texture!r}")
    return pattern[:, :, None]


def draw_scene(scene: Scene) -> Image.Image:
    """The scene as an ``IMAGE_SIZE`` x ``IMAGE_SIZE`` RGB image."""
    bg = scene.background
    textured = np.asarray(bg.colour, dtype=np.float64) + _TEXTURE_AMPLITUDE * _texture(
        bg.texture, bg.variant
    )
    image = Image.fromarray(np.clip(textured, 0, 255).astype(np.uint8))  # (H, W, 3): RGB
    draw = ImageDraw.Draw(image)
    for item in bg.clutter:  # small dull marks, under the objects
        cx, cy = item.x * IMAGE_SIZE, item.y * IMAGE_SIZE
        shade = tuple(int(c) for c in _CLUTTER_SHADES[item.kind % len(_CLUTTER_SHADES)])
        r = 1.0 + item.kind % 3 * 0.5
        if item.kind % 2:
            draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=shade)
        else:
            draw.line((cx - r, cy - r / 2, cx + r, cy + r / 2), fill=shade, width=1)
    # Larger objects first, so a small shape is never hidden behind a large one.
    for obj in sorted(scene.objects, key=lambda o: -SIZES.index(o.size)):
        radius = SIZE_RADIUS[SIZES.index(obj.size)] * IMAGE_SIZE
        cx, cy = obj.x * IMAGE_SIZE, obj.y * IMAGE_SIZE
        fill = COLOURS[obj.colour]
        if obj.shape == "circle":
            draw.ellipse((cx - radius, cy - radius, cx + radius, cy + radius), fill=fill)
        else:
            points = [(cx + radius * px, cy + radius * py) for px, py in _POLYGONS[obj.shape]]
            draw.polygon(points, fill=fill)
    return image


def png_bytes(scene: Scene) -> bytes:
    """The PNG encoding of :func:`draw_scene` (fast compression: the files are tiny)."""
    buffer = io.BytesIO()
    draw_scene(scene).save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def _write_if_absent(path: str, scene: Scene) -> bool:
    """Write ``path`` unless it exists; True when written. Temp name + rename: atomic."""
    if os.path.exists(path):
        return False
    # The pid keeps the pool's workers from ever sharing a temporary name.
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as handle:
            handle.write(png_bytes(scene))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def _render_chunk(task: tuple[str, Sequence[tuple[str, Scene]]]) -> int:
    directory, jobs = task
    return sum(_write_if_absent(os.path.join(directory, name), scene) for name, scene in jobs)


def _quiet_worker() -> None:
    """A drawing worker leaves signals to its parent: a forked worker inherits the
    parent's handlers (a search's SIGTERM handler raises ``KeyboardInterrupt``), so
    ``Pool.terminate`` would end each one with a traceback, and Ctrl+C, which reaches the
    whole process group, likewise. The default SIGTERM ends a worker silently; SIGINT is
    the parent's to act on (it closes the pool)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _remove_leftovers(directory: Path) -> None:
    """Delete temporary files an interrupted run left behind (one writer per directory)."""
    for entry in os.scandir(directory):
        if entry.name.endswith(".tmp") and ".png." in entry.name:
            Path(entry.path).unlink(missing_ok=True)


class RenderJob:
    """Images being drawn in the background while the caller does other work.

    With ``processes >= 2`` a process pool starts drawing at once; :meth:`wait` blocks
    until every image is written and returns how many were (existing files are kept);
    :meth:`close` stops the pool if the caller gives up early. With ``processes == 1``
    the drawing happens inside :meth:`wait`. Usage::

        job = RenderJob(scenes, filenames, "world/images", processes=2)
        try:
            ...  # captions, JSON
            written = job.wait()
        finally:
            job.close()
    """

    def __init__(
        self,
        scenes: Sequence[Scene],
        filenames: Sequence[str],
        directory: str | os.PathLike[str],
        *,
        processes: int = 2,
    ) -> None:
        if len(scenes) != len(filenames):
            raise ValueError(
                f"filenames: expected one per scene ({len(scenes)}), got {len(filenames)}"
            )
        if processes < 1:
            raise ValueError(f"processes: expected at least 1, got {processes}")
        self._directory = Path(directory)
        self._directory.mkdir(parents=True, exist_ok=True)
        _remove_leftovers(self._directory)
        folder = os.fspath(directory)
        jobs = list(zip(filenames, scenes, strict=True))
        self._count = len(jobs)
        self._tasks = [(folder, jobs[i : i + _CHUNK]) for i in range(0, len(jobs), _CHUNK)]
        self._pool: Pool | None = None
        self._result: AsyncResult[list[int]] | None = None
        if processes > 1 and len(self._tasks) > 1:
            # fork (where available) skips re-importing numpy and PIL in every worker.
            methods = multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context("fork" if "fork" in methods else None)
            self._pool = context.Pool(processes, initializer=_quiet_worker)
            self._result = self._pool.map_async(_render_chunk, self._tasks, chunksize=1)

    def wait(self) -> int:
        """Block until every image is on disk; the number of files written."""
        if self._result is None:
            written = sum(_render_chunk(task) for task in self._tasks)
        else:
            written = sum(self._result.get())
            if self._pool is not None:  # every chunk drawn: the workers may end their way
                self._pool.close()
                self._pool.join()
                self._pool = None
        self.close()
        logger.info("rendered %d of %d images into %s", written, self._count, self._directory)
        return written

    def close(self) -> None:
        """Stop the pool (at once if images are still being drawn)."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None
