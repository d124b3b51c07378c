"""Device requests are checked against what the machine has, once, before training."""

import pytest
import torch

from storage import with_index
from trainables.device import resolve_device


def test_cpu_and_auto_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cpu")


@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_a_gpu_is_named(monkeypatch, name):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=f"'{name}' requested but no CUDA GPU"):
        resolve_device(name)


@pytest.mark.parametrize("index", [2, 3, 127])
def test_a_gpu_index_past_the_visible_ones_is_named(monkeypatch, index):
    # the machine's GPU count is what is faked here: none is lent to this project
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    with pytest.raises(ValueError, match=r"only 2 CUDA GPU\(s\) are visible \(cuda:0 to cuda:1\)"):
        resolve_device(f"cuda:{index}")
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    # a bare "cuda" names the current device by its index: torch calls such as
    # set_per_process_memory_fraction refuse a CUDA device without one
    assert resolve_device("cuda") == torch.device("cuda:1")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert resolve_device("auto") == torch.device("cuda:0")


@pytest.mark.parametrize("name", ["cuda:abc", "gpu", "", "cpu:x"])
def test_what_is_not_a_device_is_named(name):
    with pytest.raises(ValueError, match="is not a device; expected auto, cpu, cuda or cuda:N"):
        resolve_device(name)


def test_with_index_leaves_indexed_and_cpu_devices_alone():
    assert with_index(torch.device("cpu")) == torch.device("cpu")
    assert with_index(torch.device("cuda:3")) == torch.device("cuda:3")


def test_both_trainers_set_up_the_process_through_one_function(tiny_world, monkeypatch):
    """The lone and the fused trainer alike: a batch larger than the training split is
    refused, naming the field and the split's size, before any model is built; the
    config's threads and recurrence are this process's."""
    from trainables import FusedTrainer, _packed_rnn_cpp
    from trainables.config import TrainConfig
    from trainables.data import TrainingData
    from trainables.device import set_up_training
    from trainables.loop import Trainer

    data = TrainingData.from_store(str(tiny_world))
    images = data.train.num_images
    too_big = TrainConfig(batch_size=images + 1, hidden_size=8, device="cpu")
    message = rf"batch_size: got {images + 1}, but the training split has only {images} images"
    with pytest.raises(ValueError, match=message):
        Trainer(too_big, data)
    with pytest.raises(ValueError, match=message):
        FusedTrainer([too_big, too_big], data)
    monkeypatch.setattr(_packed_rnn_cpp, "_recurrence", ["compiled"])  # restored after
    threads = torch.get_num_threads()
    try:
        config = TrainConfig(batch_size=images, threads=1, recurrence="python", device="cpu")
        assert set_up_training(config, images) == torch.device("cpu")
        assert torch.get_num_threads() == 1 and _packed_rnn_cpp.extension() is None
    finally:
        torch.set_num_threads(threads)
