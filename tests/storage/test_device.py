"""The one device resolver (``storage.resolve``) that ``trainables.device``, the store
build's ``--device`` and the benchmarks word for their own flags."""

from __future__ import annotations

import pytest
import torch

from storage import DeviceError, resolve


def test_auto_and_cpu_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve(None) == resolve("auto") == resolve("cpu") == torch.device("cpu")


@pytest.mark.parametrize("name", ["meta", "cpu:0", "cpu:x", "gpu", "", "cuda:abc", "CPU"])
def test_what_is_not_a_cpu_or_cuda_device_is_refused(name: str) -> None:
    with pytest.raises(DeviceError) as caught:
        resolve(name)
    assert caught.value.reason == "not a device" and caught.value.name == name


def test_gpus_are_checked_and_indexed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError) as caught:
        resolve("cuda")
    assert caught.value.reason == "no GPU" and caught.value.visible == 0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert resolve("cuda") == torch.device("cuda:1")
    assert resolve("auto") == torch.device("cuda:1")
    assert resolve("cuda:0") == torch.device("cuda:0")
    with pytest.raises(DeviceError) as caught:
        resolve("cuda:2")
    assert caught.value.reason == "past the GPUs" and caught.value.visible == 2
