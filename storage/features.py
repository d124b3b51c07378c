"""ResNet-152 ten-crop image features (docs/protocols.md section 4).

Each image is converted to RGB, its shorter side resized to 256 pixels (aspect kept),
cut into ten 224x224 crops (four corners and the centre, and the mirror image of each),
normalised with the ImageNet mean and standard deviation, and passed through an
ImageNet-trained ResNet-152 whose classifier is removed. An image's feature is the mean
over its ten crops of the 2048-d global-average-pooled penultimate layer.

Weights are never downloaded: they come from a local file or torchvision's cache, and
``resolve_weights`` says exactly where to put them when they are absent.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torchvision
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import functional as TF

from storage._device import DeviceError, resolve
from storage._errors import StoreError, one_line
from storage._extractors import ImageItem
from storage._files import NotRegularFileError, open_regular

__all__ = [
    "RESNET152_FILENAME",
    "ResNetExtractor",
    "default_weights_path",
    "load_image_rgb",
    "resolve_device",
    "resolve_weights",
    "ten_crop_transform",
]

logger = logging.getLogger(__name__)

RESNET152_FILENAME = "resnet152-394f9c45.pth"  # torchvision's IMAGENET1K_V1 checkpoint
RESIZE_SHORTER_SIDE = 256
CROP_SIZE = 224
NUM_CROPS = 10
FEATURE_DIM = 2048
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_HASH_CHUNK = 1 << 20  # bytes read at a time while hashing the weights file

_EXPECTED_STATE = f"a torchvision ResNet-152 state dict (such as {RESNET152_FILENAME})"
_OBTAIN_WEIGHTS = (
    "Weights cannot be downloaded on this machine. On a machine with internet access run "
    "`python -c \"import torchvision; torchvision.models.resnet152(weights='IMAGENET1K_V1')\"`, "
    f"which stores {RESNET152_FILENAME} in that machine's torch hub cache "
    "($TORCH_HOME/hub/checkpoints/, by default ~/.cache/torch/hub/checkpoints/); copy that "
    "file to {target} here, or pass --weights PATH to a copy of it."
)


def default_weights_path() -> Path:
    """Where torchvision caches the ImageNet ResNet-152 checkpoint (honours TORCH_HOME)."""
    return Path(torch.hub.get_dir()) / "checkpoints" / RESNET152_FILENAME


def resolve_weights(weights: str | None) -> str | Path:
    """Resolve the ``--weights`` option to ``"random"`` or an existing checkpoint file.

    ``None`` means torchvision's cache (``default_weights_path()``); ``"random"`` means
    an untrained network (for tests and the embedded world); anything else is a path.
    Raises ``StoreError`` naming the expected file when it does not exist.
    """
    if weights == "random":
        return "random"
    if weights is None:
        target = default_weights_path()
        if not target.is_file():
            raise StoreError(
                f"ResNet-152 ImageNet weights not found: expected the file {target} "
                "(torchvision's cache). " + _OBTAIN_WEIGHTS.format(target=target)
            )
        return target.resolve()
    target = Path(weights).expanduser()
    if not target.is_file():
        state = "not a regular file" if target.exists() else "no such file"
        raise StoreError(
            f"--weights {weights}: {state} ({target.absolute()}); expected a torchvision "
            f"ResNet-152 state dict such as {RESNET152_FILENAME}. "
            + _OBTAIN_WEIGHTS.format(target=target.absolute())
        )
    return target.resolve()


def load_image_rgb(path: str | os.PathLike[str]) -> Image.Image:
    """Decode ``path`` fully and return it as an 8-bit RGB image of the same size.

    Alpha is dropped, not composited (as torchvision's own ``pil_loader`` does); palette
    images with transparency go through RGBA so PIL does not warn. 16-bit greyscale is
    scaled by 255/65535; 32-bit integer greyscale (``I``) likewise when its values fit in
    16 bits, else min-max scaled; float greyscale (``F``) is scaled by 255 when in [0, 1],
    kept when in [0, 255], else min-max scaled. Decoding errors propagate (``OSError``,
    ``PIL.UnidentifiedImageError``, ...), and so does a path that is not a regular file
    (``NotRegularFileError``: a FIFO, socket, directory or device named like an image is
    refused before it is read, so it can never block a build); an unconvertible mode
    raises ``StoreError``.
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


class _TenCrop:
    """RGB image -> ``(10, 3, 224, 224)`` float tensor: shorter side to 256, five crops
    (top-left, top-right, bottom-left, bottom-right, centre), normalised, then the
    horizontal mirror of each of the five in the same order. A class rather than a
    closure so that DataLoader workers can pickle it."""

    def __call__(self, image: Image.Image) -> torch.Tensor:
        resized = TF.resize(image, [RESIZE_SHORTER_SIDE])  # bilinear, antialiased
        crops = torch.stack([TF.to_tensor(crop) for crop in TF.five_crop(resized, CROP_SIZE)])
        mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
        crops = (crops - mean) / std
        # Mirroring each crop (rather than cropping the mirrored image, as torchvision's
        # TenCrop does) makes crop 5+k exactly the mirror of crop k; the two differ only
        # by a one-pixel shift of the centre crop when the margin is odd.
        return torch.cat([crops, crops.flip(-1)])


def ten_crop_transform() -> Callable[[Image.Image], torch.Tensor]:
    """The feature transform: RGB PIL image -> normalised ``(10, 3, 224, 224)`` tensor."""
    return _TenCrop()


# One decoded image: (its index in the call, its crops or None, None or the failure reason).
_Sample = tuple[int, torch.Tensor | None, str | None]
# One batch: (indices of the decoded images, their crops stacked, (index, reason) failures).
_Batch = tuple[list[int], torch.Tensor, list[tuple[int, str]]]


class _ImageCrops(Dataset[_Sample]):
    """Decodes images for the DataLoader; a bad file becomes a reason, never an exception."""

    def __init__(self, paths: Sequence[Path], transform: Callable[[Image.Image], torch.Tensor]):
        self._paths = list(paths)
        self._transform = transform

    def __len__(self) -> int:
        return len(self._paths)

    def __getitem__(self, index: int) -> _Sample:
        try:
            return index, self._transform(load_image_rgb(self._paths[index])), None
        except FileNotFoundError:
            return index, None, "missing"
        except NotRegularFileError as exc:  # a FIFO, directory...: refused, never opened
            return index, None, str(exc.strerror)
        except Exception as exc:  # any decoder failure must cost one image, not the batch
            return index, None, f"unreadable: {one_line(exc) or type(exc).__name__}"


def _collate(samples: list[_Sample]) -> _Batch:
    good = [(index, crops) for index, crops, _ in samples if crops is not None]
    failures = [(index, reason) for index, _, reason in samples if reason is not None]
    if good:
        stacked = torch.cat([crops for _, crops in good])
    else:
        stacked = torch.empty(0, 3, CROP_SIZE, CROP_SIZE)
    return [index for index, _ in good], stacked, failures


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open_regular(path) as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _read_state_dict(path: Path) -> Mapping[str, torch.Tensor]:
    """Read a state dict from ``path`` with ``weights_only`` (no arbitrary pickles)."""
    try:
        with open_regular(path) as handle:
            state = torch.load(handle, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch.load raises many types for a foreign or damaged file
        reason = _load_reason(exc)
        raise StoreError(
            f"--weights {path}: cannot be read as {_EXPECTED_STATE}: {reason}"
        ) from exc
    if not isinstance(state, Mapping) or not all(
        isinstance(value, torch.Tensor) for value in state.values()
    ):
        raise StoreError(
            f"--weights {path}: holds a {type(state).__name__}, expected {_EXPECTED_STATE}"
        )
    return state


_UNPICKLER = "WeightsUnpickler error:"


def _load_reason(exc: Exception) -> str:
    """Why ``torch.load(weights_only=True)`` refused a file, without torch's advice to
    load it with ``weights_only=False`` (which would run whatever pickle it holds: this
    reader never does)."""
    text = one_line(exc)
    if _UNPICKLER in text:  # torch wraps the unpickler's reason in paragraphs of advice
        cause = text.split(_UNPICKLER, 1)[1].split("Check the documentation", 1)[0].strip()
        return f"not a state dict torch.save wrote ({cause or 'refused by the safe unpickler'})"
    return (text[:500] and f"{type(exc).__name__}: {text[:500]}") or type(exc).__name__


def _load_state_dict(model: torch.nn.Module, state: Mapping[str, torch.Tensor], path: Path) -> None:
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise StoreError(f"--weights {path}: is not {_EXPECTED_STATE}: {str(exc)[:500]}") from exc


def resolve_device(device: str | None) -> torch.device:
    """The ``--device`` to run on (``storage``'s one device resolver, worded for the
    flag): ``None`` is CUDA when there is a GPU, else the CPU; anything this machine
    cannot run on is refused, naming the option."""
    try:
        return resolve(device)
    except DeviceError as err:
        if err.reason == "not a device":
            detail = f" ({one_line(err.detail)[:200]})" if err.detail else ""
            raise StoreError(f"--device {device}: expected cpu, cuda or cuda:N{detail}") from None
        if err.reason == "no GPU":
            raise StoreError(
                f"--device {device}: this machine has no CUDA device; use --device cpu"
            ) from None
        raise StoreError(
            f"--device {device}: this machine has CUDA devices 0 to {err.visible - 1}"
        ) from None


@contextlib.contextmanager
def _full_fp32(device: torch.device) -> Iterator[None]:
    """Keep cuDNN convolutions in full fp32 (PyTorch allows TF32 for them by default)."""
    if device.type != "cuda":
        yield
        return
    previous = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = previous


class ResNetExtractor:
    """The ResNet-152 ten-crop ``FeatureExtractor`` (see the module docstring)."""

    dim = FEATURE_DIM

    def __init__(
        self,
        weights: str | None = None,
        *,
        device: str | None = None,
        batch_size: int = 32,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        if batch_size < 1:
            raise StoreError(f"batch_size must be at least 1, got {batch_size}")
        if num_workers < 0:
            raise StoreError(f"num_workers must be 0 or more, got {num_workers}")
        resolved = resolve_weights(weights)  # fails before any work
        self.batch_size = batch_size
        self.num_workers = num_workers
        self._seed = seed
        self._device = resolve_device(device)
        if resolved == "random":
            self._weights: Path | None = None
            self._weights_sha256: str | None = None
            with torch.random.fork_rng(devices=[]):  # leave the caller's RNG untouched
                torch.manual_seed(seed)
                model = torchvision.models.resnet152(weights=None)
        else:
            self._weights = Path(resolved)
            state = _read_state_dict(self._weights)  # a foreign file fails before the build
            model = torchvision.models.resnet152(weights=None)
            _load_state_dict(model, state, self._weights)
            self._weights_sha256 = _sha256(self._weights)
        model.fc = torch.nn.Identity()  # penultimate layer: 2048-d average pool output
        model.eval().requires_grad_(False)
        if self._device.type == "cuda":
            model = model.to(self._device, memory_format=torch.channels_last)
        else:
            model = model.to(self._device)
        self._model = model
        self._transform = ten_crop_transform()

    def describe(self) -> dict[str, Any]:
        """What the manifest records about this extractor."""
        return {
            "model": "resnet152",
            "weights": "random" if self._weights is None else str(self._weights),
            "weights_sha256": self._weights_sha256,
            "crops": "ten-crop 224 of shorter-side 256, mean of 10",
            "normalisation": "imagenet",
            "seed": self._seed if self._weights is None else None,
        }

    def extract(self, items: Sequence[ImageItem]) -> tuple[np.ndarray, list[str | None]]:
        """Features of ``items`` (float32, ``(n, 2048)``) and a failure reason or None each."""
        features = np.zeros((len(items), FEATURE_DIM), dtype=np.float32)
        errors: list[str | None] = [None] * len(items)
        if not items:
            return features, errors
        on_cuda = self._device.type == "cuda"
        loader = DataLoader(
            _ImageCrops([item.path for item in items], self._transform),
            batch_size=self.batch_size,
            shuffle=False,
            num_workers=self.num_workers,
            collate_fn=_collate,
            pin_memory=on_cuda,
        )
        start = time.perf_counter()
        with torch.inference_mode(), _full_fp32(self._device):
            for indices, crops, failures in loader:
                for index, reason in failures:
                    errors[index] = reason
                if not indices:
                    continue
                batch = crops.to(
                    self._device,
                    non_blocking=on_cuda,
                    memory_format=torch.channels_last if on_cuda else torch.preserve_format,
                )
                pooled = self._model(batch).float().reshape(len(indices), NUM_CROPS, FEATURE_DIM)
                features[indices] = pooled.mean(dim=1).cpu().numpy()
        elapsed = time.perf_counter() - start
        failed = sum(reason is not None for reason in errors)
        logger.info(
            "resnet152 ten-crop: %d images (%d failed) in %.1f s on %s, %.2f images/s",
            len(items),
            failed,
            elapsed,
            self._device,
            len(items) / elapsed if elapsed > 0 else float("inf"),
        )
        return features, errors
