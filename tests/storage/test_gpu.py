"""The GPU test group (``pytest -m gpu``, see ``tests/trainables/test_gpu.py``): the
ResNet-152 feature extractor on the device (channels-last, pinned host memory,
non-blocking copies, fp32 convolutions with TF32 off), against the CPU. Skipped without
a CUDA GPU; ``GROUNDED_GPU_TESTS_DEVICE=cpu`` runs it on the CPU as a dry run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from storage._extractors import ImageItem
from storage.features import FEATURE_DIM, ResNetExtractor
from storage.features import resolve_device as resolve_store_device
from tests import gpu
from tests.gpu import DEVICE_NAME, DRY_RUN, ON_GPU, group_device
from tests.tolerances import assert_close

pytestmark = gpu.pytestmark


@pytest.fixture
def threads() -> Iterator[None]:
    """All the CPU's cores for the CPU reference on the GPU machine, restored after."""
    before = torch.get_num_threads()
    if ON_GPU:
        torch.set_num_threads(max(1, min(16, os.cpu_count() or 1)))
    yield
    torch.set_num_threads(before)


def test_resnet_features_on_the_device_agree_with_the_cpu(tmp_path: Path, threads: None) -> None:
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)).save(tmp_path / "a.png")
    (tmp_path / "bad.jpg").write_bytes(rng.bytes(300))
    items = [ImageItem(name, tmp_path / name, {}) for name in ("a.png", "bad.jpg")]
    device = group_device()
    resolved = resolve_store_device(DEVICE_NAME)  # --device cuda
    assert resolved.type == device.type
    if ON_GPU:
        assert resolved.index is not None, resolved

    extractor = ResNetExtractor("random", device=DEVICE_NAME, batch_size=2, seed=0)
    assert {p.device.type for p in extractor._model.parameters()} == {device.type}
    tf32 = torch.backends.cudnn.allow_tf32
    features, errors = extractor.extract(items)
    assert torch.backends.cudnn.allow_tf32 == tf32  # turned off for the extraction only

    assert features.shape == (2, FEATURE_DIM) and features.dtype == np.float32
    assert errors[0] is None and errors[1] is not None and errors[1].startswith("unreadable")
    assert np.isfinite(features).all() and not features[1].any()
    if DRY_RUN:  # the CPU reference would be the same computation again
        return
    reference, _ = ResNetExtractor("random", device="cpu", batch_size=2, seed=0).extract(items)
    # float32 on both (the extractor turns TF32 off for cuDNN's convolutions), other
    # kernels: tests/tolerances.py's CPU-against-CUDA bound, on the features as fractions
    # of the largest (a random ResNet-152's grow to ~1e8 through its residual blocks)
    scale = float(np.abs(reference).max())
    assert_close(features / scale, reference / scale, devices=(device, "cpu"))
