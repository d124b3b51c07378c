"""The GPU test group (``pytest -m gpu``): every CUDA path of ``trainables`` (and, in
``tests/storage/test_gpu.py``, of ``storage``) on one GPU, without Ray, MLflow or Optuna,
at tiny sizes, meant to finish well inside 3 minutes on one H100/H200:

    python -m pytest -m gpu tests/trainables/test_gpu.py tests/storage/test_gpu.py

Name the two files: collecting the whole of ``tests/`` imports the modules of the tests
that need Ray, MLflow or Optuna, which a GPU machine may not have.

Every test is marked ``gpu`` and skipped without a CUDA GPU. With the environment variable
``GROUNDED_GPU_TESTS_DEVICE=cpu`` the same tests run on the CPU instead, a dry run that
exercises the test code on a machine without a GPU (``tests/gpu.py``); the assertions that
only mean something on a GPU (an indexed CUDA device, the memory cap, a CPU reference
computed by other kernels) are left out then:

    GROUNDED_GPU_TESTS_DEVICE=cpu python -m pytest -m gpu tests -p no:cacheprovider -q

On the device: training steps in fp32 and bf16 for every encoder family and variant (the
presets), against the CPU's steps; evaluation (dev retrieval, the dev semantic score, the
test battery), snapshots and the snapshot ensemble; checkpoints written on the GPU,
resumed on the CPU and back; ``trainables.train`` and ``trainables.encode`` with
``--device cuda``; ``SentenceEncoder``; SentEval's relatedness protocol; the retrieval
metrics; two packed trials, each in its own process under a quarter of the GPU's
memory; and the device string ``cuda`` (no index) wherever a user can give it.

Tolerances: results compared across devices or dtypes use ``tests/tolerances.py`` (by
device and dtype: float32 CPU against CUDA rtol/atol 1e-3, bf16 rtol 1.6e-2 and atol
5e-2, one device in another reduction order 1e-5); training trajectories, which that
module does not cover, use the constants below, each with its reason. Exact equality only
where the same kernels run on the same inputs (the same device twice, a dry run's "GPU"
against its CPU, or integer-valued scores that every summation order gives exactly).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from bench._relatedness_loop import fit_loop
from storage.senteval import SemanticBenchmark, SentencePairs, SupervisedTask, load_senteval
from tests import gpu
from tests.gpu import DEVICE_NAME, DRY_RUN, ON_GPU, group_device
from tests.tolerances import REORDERED, assert_close
from trainables import _packed_rnn, checkpoint, metrics, names
from trainables.checkpoint import EnsembleWeights, load_ensemble
from trainables.config import PRECISIONS, TrainConfig, applicable
from trainables.data import TrainingData, default_senteval, epoch_batches
from trainables.device import resolve_device
from trainables.encode import main as encode_main
from trainables.encoder import SentenceEncoder
from trainables.loop import Trainer
from trainables.metrics import coco_1k, retrieval_metrics, retrieval_metrics_with_ci
from trainables.model import GroundedEncoder
from trainables.optim import GroupAdam
from trainables.presets import PRESETS, preset
from trainables.relatedness import (
    RelatednessProtocol,
    predict_relatedness,
    predict_relatedness_tasks,
    supervised_relatedness_tasks,
)
from trainables.semantic import EmbeddingTable, make_semantic
from trainables.train import main as train_main
from trainables.vocabulary import WordVocabulary

pytestmark = gpu.pytestmark

REPO = Path(__file__).resolve().parents[2]

# -- tolerances of training trajectories (tests/tolerances.py has the rest) -----------------
# Training losses (hinge sums over ~2,000 in-batch pairs), GPU in IEEE fp32 (TF32 off)
# against the CPU, same initial weights and batches: only summation orders differ (~1e-7
# relative per sum), and Adam's steps stay proportional to those differences.
LOSS_RTOL_IEEE = 1e-4
# ... the same with TF32 left on, as a user runs it: each step's losses start from
# embeddings ~2e-4 apart (seen on an H200); a few steps at the first, small rates.
LOSS_RTOL_TF32 = 5e-3
# The first step's gradients, IEEE fp32: cuDNN's backward against the CPU's hand-written
# one (trainables._packed_rnn), as the relative norm of their difference per tensor.
GRAD_RTOL_IEEE = 1e-3
# The weights after those steps, IEEE fp32: Adam moves each by about lr (4.4e-5 at the
# 5th step of the 60-step cycle, 8.6e-5 over the 5); its moves on the two devices
# differ far less.
WEIGHT_ATOL_IEEE = 1e-5
# ... except the attention's output bias: a softmax over time ignores a constant, so its
# gradient is zero but for rounding noise, which Adam turns into moves of about lr in
# either direction on each device: twice their sum, with room for Adam's ratio above 1.
ROUNDING_ONLY = ("attention.out.bias",)
ROUNDING_ONLY_ATOL = 4 * 8.6e-5
# A whole epoch's mean loss (15 steps at learning rates up to lr_max) after resuming a
# checkpoint on the other device, IEEE fp32.
EPOCH_LOSS_RTOL_IEEE = 1e-3
# The same device resuming its own checkpoint: the same kernels on the same inputs, but
# cuDNN's weight gradients may be summed in another order from run to run (atomics).
EPOCH_LOSS_RTOL_SAME_DEVICE = 1e-5
# bf16 autocast training against fp32 on the same device, same weights and batches, over a
# few steps: each loss sums ~2,000 cosines, each off by ~1e-2 at most, mostly cancelling.
BF16_LOSS_RTOL = 2e-2

TINY: dict[str, Any] = dict(hidden_size=16, attention_hidden=16, batch_size=32, epochs=2,
                            snapshot_interval=1, ensemble_size=2, semantic_every=0,
                            threads=1)  # fmt: skip
FAMILY_SIZES = {"hidden_size": 16, "attention_hidden": 16, "word_embedding_dim": 16}
STEPS = 3  # training steps of each family
AGREEMENT_STEPS = 5
# one round of the classifier per battery: the protocol's rule is the same, and cheap
FAST = RelatednessProtocol(max_epoch=0)
SENTENCES = [
    "A small red circle.",
    "",
    "two blue squares next to a green triangle",
    "a green triangle ünd ✓",
    "x" * 300,
]
# every preset (each family and variant) and three more paths: the attention penalty,
# an LSTM with max pooling, and frozen pretrained word vectors behind a learned map
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    **{name: (name, {}) for name in PRESETS},
    "char_rnn_heads2": ("char_rnn_heads2", {"attention_penalty": 0.1}),
    "char_rnn_lstm_max": ("char_rnn", {"rnn_type": "lstm", "pooling": "max"}),
    "cap2img_frozen_vectors": ("cap2img", {"word_vectors_update": "frozen_map"}),
}


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def device() -> torch.device:
    """``cuda:0``, or the CPU in a dry run (``GROUNDED_GPU_TESTS_DEVICE=cpu``)."""
    return group_device()


@pytest.fixture(scope="module")
def data(tiny_world: Path) -> TrainingData:
    return TrainingData.from_store(str(tiny_world))


@pytest.fixture(scope="module")
def benchmark(tiny_world: Path) -> SemanticBenchmark:
    where = default_senteval(str(tiny_world))
    assert where is not None
    return load_senteval(where)


@pytest.fixture(autouse=True)
def python_loop_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the GPU machine the CPU's reference steps run the Python loop of
    ``trainables._packed_rnn`` (the same equations as its C++ loop), so that nothing
    compiles there (a build of a minute, and a compiler the GPU machine may lack)."""
    if ON_GPU:
        monkeypatch.setattr(_packed_rnn, "LOOP", "python")


@pytest.fixture
def ieee_fp32(monkeypatch: pytest.MonkeyPatch) -> None:
    """cuDNN's RNNs in IEEE fp32 (no TF32), to compare fp32 with fp32 on the CPU; matrix
    products are IEEE fp32 by torch's default already."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)


@pytest.fixture(scope="module")
def vectors_file(data: TrainingData, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GloVe-format file of 16-d vectors for 30 of the training captions' words."""
    words = WordVocabulary.build(list(data.train.captions), min_count=1).words[:30]
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("vectors") / "glove.txt"
    lines = [" ".join([w, *(f"{x:.5f}" for x in rng.normal(size=16))]) for w in words]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def gpu_model(
    data: TrainingData, device: torch.device, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The ensemble file of a model trained on the device: its final model (no snapshot
    was taken), saved as it was there, device tensors and all."""
    config = tiny(str(device), epochs=1, snapshot_interval=2, ensemble_size=1)
    trainer = Trainer(config, data)
    list(trainer.run())
    weights = EnsembleWeights.from_training_state(trainer.state_dict())
    assert weights.weights == "final model"
    return weights.save(tmp_path_factory.mktemp("gpu_model") / checkpoint.ENSEMBLE_FILE)


# -- helpers ------------------------------------------------------------------------------


def tiny(device: str, **changes: Any) -> TrainConfig:
    """The paper's model (char_rnn) at a tiny size on ``device``."""
    return TrainConfig(**{**TINY, "device": device, **changes})


def first_steps(data: TrainingData, config: TrainConfig, steps: int) -> np.ndarray:
    """The caption rows of the first ``steps`` minibatches of epoch 0."""
    return epoch_batches(data.train.num_images, config.batch_size, config.seed, 0)[:steps]


def family_config(variant: str, precision: str, device: str, vectors: Path) -> TrainConfig:
    name, changes = VARIANTS[variant]
    encoder = PRESETS[name]["encoder"]
    if changes.get("word_vectors_update") == "frozen_map":
        changes = {**changes, "word_vectors": str(vectors)}
    run = dict(batch_size=32, epochs=1, semantic_every=0, threads=1, device=device,
               precision=precision)  # fmt: skip
    return preset(name, **applicable(FAMILY_SIZES, encoder), **changes, **run)


def tensors(value: object) -> Iterator[torch.Tensor]:
    """Every tensor in a nested dict/list/tuple (a checkpoint's state)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from tensors(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from tensors(item)


def model_tensors(trainer: Trainer) -> list[torch.Tensor]:
    """The model's parameters and buffers, and the optimiser's per-parameter state (Adam's
    moments; its step count is a host integer)."""
    state = [t for pair in trainer.optimizer.moments().values() for t in pair]
    return [*trainer.model.parameters(), *trainer.model.buffers(), *state]


def assert_on(where: torch.device, items: list[torch.Tensor], what: str) -> None:
    wrong = {str(t.device) for t in items if t.device.type != where.type}
    if where.type == "cuda" and where.index is not None:
        wrong |= {str(t.device) for t in items if t.device != where}
    assert not wrong, f"{what}: tensors on {sorted(wrong)}, expected {where}"


def max_difference(a: np.ndarray | torch.Tensor, b: np.ndarray | torch.Tensor) -> float:
    a = a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else a
    b = b.detach().cpu().numpy() if isinstance(b, torch.Tensor) else b
    assert a.shape == b.shape
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max(initial=0.0))


def without_timing(report: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in report.items() if not k.startswith(("time/", names.CAPTIONS_PER_S))}


# -- the device -----------------------------------------------------------------------------


def test_cuda_without_an_index_resolves_to_the_current_device() -> None:
    """``--device cuda`` (and ``auto`` on a GPU machine) must name an index: torch needs
    one for ``set_per_process_memory_fraction`` (how packed trials are capped)."""
    resolved = resolve_device(DEVICE_NAME)
    if DRY_RUN:
        assert resolved == torch.device("cpu")
        return
    current = torch.device("cuda", torch.cuda.current_device())
    assert resolved.index is not None, f"resolve_device('cuda') gave {resolved}, no index"
    assert resolved == current
    assert resolve_device("auto") == current
    assert resolve_device("cuda:0") == torch.device("cuda:0")


# -- training: every family, fp32 and bf16 --------------------------------------------------


def test_the_optimiser_step_on_the_device_is_torchs_adam(device: torch.device) -> None:
    """``GroupAdam`` on the device (all parameters at once on a GPU) against
    ``torch.optim.Adam`` there (its default: foreach on a GPU), 5 steps of the paper's
    model shapes at n = 64: the same weights, bit for bit."""
    generator = torch.Generator().manual_seed(0)
    model = GroundedEncoder(TrainConfig(hidden_size=64), 96)
    start = {n: p.detach().to(device) for n, p in model.named_parameters()}
    ours = {n: torch.nn.Parameter(p.clone()) for n, p in start.items()}
    theirs = {n: torch.nn.Parameter(p.clone()) for n, p in start.items()}
    adam, torch_adam = GroupAdam(ours), torch.optim.Adam(theirs.values())
    for step in range(5):
        for name in start:
            grad = torch.randn(start[name].shape, generator=generator).to(device)
            ours[name].grad, theirs[name].grad = grad, grad.clone()
        lr = 1e-3 * (step + 1)
        adam.step(lr)
        torch_adam.param_groups[0]["lr"] = lr
        torch_adam.step()
    for name in start:
        assert_close(ours[name].detach(), theirs[name].detach(), devices=(device, device),
                     same_kernels=True, err_msg=name)  # fmt: skip


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_family_trains_and_embeds_on_the_device(
    variant: str, precision: str, data: TrainingData, device: torch.device, vectors_file: Path
) -> None:
    config = family_config(variant, precision, str(device), vectors_file)
    trainer = Trainer(config, data)
    assert trainer.device.type == device.type
    assert_on(device, model_tensors(trainer), "the model")
    assert_on(device, [trainer.train_split.tokens, trainer.train_split.features], "the data")
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}

    losses = trainer.train_batches(first_steps(data, config, STEPS))

    assert losses.device.type == device.type and losses.shape == (STEPS,)
    assert torch.isfinite(losses).all(), losses
    unused = "image_encoder." if config.pairing == "caption" else None  # text-only: no image
    trainable = [
        n
        for n, p in trainer.model.named_parameters()
        if p.requires_grad and not (unused and n.startswith(unused))
    ]
    changed = [n for n in trainable if not torch.equal(before[n], trainer.model.get_parameter(n))]
    assert changed == trainable, f"unchanged after {STEPS} steps: {set(trainable) - set(changed)}"
    frozen = [n for n, p in trainer.model.named_parameters() if not p.requires_grad]
    assert all(torch.equal(before[n], trainer.model.get_parameter(n)) for n in frozen)
    if variant == "cap2img_frozen_vectors":
        assert frozen == ["caption_encoder.embedding.table.weight"]
    assert_on(device, model_tensors(trainer), "the model after training")

    # that model from its file, embedding raw text on the device, against the CPU in fp32
    weights = EnsembleWeights.from_training_state(trainer.state_dict())
    on_cpu = dataclasses.replace(weights, config=weights.config.replace(precision="fp32"))
    there = SentenceEncoder(weights, device=str(device))
    reference = SentenceEncoder(on_cpu, device="cpu")
    devices = (device, "cpu")
    for space in ("sentence", "joint"):
        got = there.encode(SENTENCES, space=space)
        expected = reference.encode(SENTENCES, space=space)
        assert np.isfinite(got).all()
        if precision == "bf16":  # bf16 autocast against fp32
            assert_close(got, expected, devices=devices, dtype=torch.bfloat16, same_kernels=False)
        else:
            assert_close(got, expected, devices=devices, err_msg=space)
    features = data.test.features[:5]  # no autocast on the image side
    assert_close(there.encode_images(features), reference.encode_images(features), devices=devices)


@pytest.mark.parametrize("tf32", [False, True], ids=["ieee_fp32", "tf32_default"])
def test_fp32_training_steps_agree_with_the_cpu(
    tf32: bool, data: TrainingData, device: torch.device, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default family (char_rnn, GRU): the same steps from the same initial weights on
    the device (cuDNN) and on the CPU (the hand-written loop) give the same losses; in IEEE
    fp32 the same gradients and weights too."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", tf32)
    config = tiny(str(device))
    steps = first_steps(data, config, AGREEMENT_STEPS)
    runs = []
    for where in (str(device), "cpu"):
        trainer = Trainer(config.replace(device=where), data)
        first = trainer.train_batches(steps[:1])
        grads = {n: p.grad.detach().cpu() for n, p in trainer.model.named_parameters()
                 if p.grad is not None}  # fmt: skip
        losses = torch.cat([first, trainer.train_batches(steps[1:])]).cpu()
        weights = {n: p.detach().cpu() for n, p in trainer.model.named_parameters()}
        runs.append((losses, grads, weights))
    (gpu_losses, gpu_grads, gpu_weights), (cpu_losses, cpu_grads, cpu_weights) = runs

    rtol = LOSS_RTOL_TF32 if tf32 else LOSS_RTOL_IEEE
    relative = ((gpu_losses - cpu_losses).abs() / cpu_losses.abs()).max().item()
    assert relative <= rtol, f"losses {gpu_losses.tolist()} vs {cpu_losses.tolist()}"
    if tf32:
        return
    assert set(gpu_grads) == set(cpu_grads) == set(cpu_weights)
    for name, expected in cpu_grads.items():
        if name.endswith(ROUNDING_ONLY):
            continue
        error = ((gpu_grads[name] - expected).norm() / expected.norm().clamp_min(1e-30)).item()
        assert error <= GRAD_RTOL_IEEE, f"gradient of {name}: {error:.3g} relative"
    for name, expected in cpu_weights.items():
        bound = ROUNDING_ONLY_ATOL if name.endswith(ROUNDING_ONLY) else WEIGHT_ATOL_IEEE
        difference = max_difference(gpu_weights[name], expected)
        assert difference <= bound, f"{name}: {difference:.3g} apart"


def test_bf16_training_steps_stay_near_fp32_on_the_device(
    data: TrainingData, device: torch.device
) -> None:
    config = tiny(str(device))
    steps = first_steps(data, config, AGREEMENT_STEPS)
    losses = {}
    for precision in PRECISIONS:
        trainer = Trainer(config.replace(precision=precision), data)
        losses[precision] = trainer.train_batches(steps).cpu()
    assert torch.isfinite(losses["bf16"]).all()
    relative = ((losses["bf16"] - losses["fp32"]).abs() / losses["fp32"].abs()).max().item()
    assert relative <= BF16_LOSS_RTOL, f"bf16 {losses['bf16'].tolist()} vs {losses['fp32']}"


# -- evaluation, snapshots and the ensemble -------------------------------------------------


@pytest.mark.parametrize("own_reports", [False, True], ids=["battery_late", "battery_waited"])
def test_evaluation_snapshots_and_the_ensemble_on_the_device(
    own_reports: bool,
    data: TrainingData,
    benchmark: SemanticBenchmark,
    device: torch.device,
    tmp_path: Path,
) -> None:
    """Dev retrieval and the dev semantic score after every epoch, and the test battery
    (SentEval's protocol on the device) in a background thread, on a GPU on its own CUDA
    stream, while the next epoch trains (its metrics filed under their own epoch), each
    delivered with the next report or waited for in its own (``own_reports``:
    ``complete_at``); bf16 evaluation; two snapshots and their ensemble."""
    config = tiny(str(device), semantic_every=1, precision="bf16")
    semantic = make_semantic(benchmark, config.evaluation, config.run)
    assert semantic is not None
    assert torch.device(semantic.test.device).type == device.type
    semantic.test.protocol = FAST
    complete_at = range(config.epochs + 1) if own_reports else ()
    trainer = Trainer(config, data, semantic, complete_at=complete_at)
    reports = list(trainer.run())

    assert [r["epoch"] for r in reports] == [0.0, 1.0, 2.0]
    for report in reports:
        for split in (names.DEV, names.TEST):
            assert {names.key(split, k) for k in names.RETRIEVAL} <= set(report)
        assert names.PRIMARY_SEMANTIC in report
    battery = names.key(names.TEST, "semantic")
    assert [battery in epoch for epoch in trainer.history] == [True, True, True]
    assert [battery in r for r in reports] == [own_reports, own_reports, True]
    assert battery in reports[-1]  # the last report waits for its own battery
    for epoch in trainer.history:
        assert all(np.isfinite(v) for v in epoch.values()), epoch
    final = reports[-1]
    assert names.is_finished(final) and final[names.ENSEMBLE_SIZE] == 2.0
    assert names.key(names.ENSEMBLE, "semantic") in final
    assert [s.epoch for s in sorted(trainer.ensemble.snapshots, key=lambda s: s.epoch)] == [1, 2]
    for snapshot in trainer.ensemble.snapshots:  # kept on the CPU, whatever the training device
        assert_on(torch.device("cpu"), list(snapshot.state.values()), "a snapshot")

    # the ensemble from its file, rebuilt on the device: the trainer's own test numbers
    path = EnsembleWeights.from_training_state(trainer.state_dict()).save(tmp_path / "e.pt")
    loaded = load_ensemble(path)
    models = loaded.models(device)
    assert len(models) == 2
    assert_on(device, [p for m in models for p in m.parameters()], "the ensemble")
    images, captions = trainer.evaluation.embed_split(trainer.test_split, models)
    assert images.device.type == captions.device.type == device.type
    found = retrieval_metrics(images, captions)  # the same kernels on the same inputs
    assert found == {k: final[names.key(names.ENSEMBLE, k)] for k in found}
    # ... and from raw text by SentenceEncoder on the device, batched its own way
    encoder = SentenceEncoder(loaded, device=str(device))
    text = encoder.encode(list(data.test.captions), normalize=False, space="joint")
    # the same (bf16) kernels on the same batches; only the raw text's path differs
    assert_close(text, captions, devices=(device, device), same_kernels=False)


# -- checkpoints between the GPU and the CPU ------------------------------------------------


@dataclasses.dataclass(frozen=True)
class GpuRun:
    """A run of three epochs on the device, in IEEE fp32: its training state after
    epoch 1, and the report of epoch 2 that followed without interruption."""

    config: TrainConfig
    written_on_gpu: bytes
    epoch_2: dict[str, float]


@pytest.fixture(scope="module")
def gpu_run(data: TrainingData, device: torch.device) -> Iterator[GpuRun]:
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False  # as ieee_fp32, for the module's scope
    try:
        config = tiny(str(device), epochs=3)
        trainer = Trainer(config, data)
        run = trainer.run()
        for _ in range(2):  # epochs 0 and 1
            next(run)
        yield GpuRun(config, trainer.save_checkpoint(), next(run))
    finally:
        torch.backends.cudnn.allow_tf32 = tf32


def test_a_checkpoint_written_on_the_gpu_loads_on_the_cpu_and_goes_on(
    gpu_run: GpuRun, data: TrainingData, ieee_fp32: None
) -> None:
    cpu = torch.device("cpu")
    state = checkpoint.load_training_state(gpu_run.written_on_gpu, "cpu")
    assert_on(cpu, list(tensors(state)), "the state loaded for the CPU")
    trainer = Trainer(gpu_run.config.replace(device="cpu"), data)
    trainer.load_checkpoint(gpu_run.written_on_gpu)
    assert_on(cpu, model_tensors(trainer), "resumed on the CPU")
    assert trainer.epoch == 1 and len(trainer.ensemble.snapshots) == 1
    report = next(trainer.run())
    assert report["epoch"] == 2.0
    expected = gpu_run.epoch_2[names.LOSS]
    assert report[names.LOSS] == pytest.approx(expected, rel=EPOCH_LOSS_RTOL_IEEE)
    if DRY_RUN:  # the same kernels throughout: exactly the run that was never interrupted
        assert without_timing(report) == without_timing(gpu_run.epoch_2)


def test_a_checkpoint_written_on_the_gpu_resumes_there(
    gpu_run: GpuRun, data: TrainingData, device: torch.device, ieee_fp32: None
) -> None:
    state = checkpoint.load_training_state(gpu_run.written_on_gpu, device)
    assert_on(device, list(tensors(state["model"])), "the state loaded for the device")
    trainer = Trainer(gpu_run.config, data)
    trainer.load_checkpoint(gpu_run.written_on_gpu)
    assert_on(device, model_tensors(trainer), "resumed on the device")
    report = next(trainer.run())
    assert report["epoch"] == 2.0
    expected = gpu_run.epoch_2[names.LOSS]
    assert report[names.LOSS] == pytest.approx(expected, rel=EPOCH_LOSS_RTOL_SAME_DEVICE)


def test_a_checkpoint_written_on_the_cpu_resumes_on_the_gpu(
    gpu_run: GpuRun, data: TrainingData, device: torch.device, ieee_fp32: None
) -> None:
    """The GPU's state, trained on by the CPU, back on the GPU: every tensor there, the
    snapshots it carries (two devices' epochs) making the final ensemble."""
    on_cpu = Trainer(gpu_run.config.replace(device="cpu"), data)
    on_cpu.load_checkpoint(gpu_run.written_on_gpu)
    cpu_run = on_cpu.run()
    next(cpu_run)  # epoch 2
    written_on_cpu = on_cpu.save_checkpoint()

    back = Trainer(gpu_run.config, data)
    back.load_checkpoint(written_on_cpu)
    assert_on(device, model_tensors(back), "back on the device")
    assert back.epoch == 2 and len(back.ensemble.snapshots) == 2
    last_on_gpu, last_on_cpu = next(back.run()), next(cpu_run)
    assert last_on_gpu["epoch"] == last_on_cpu["epoch"] == 3.0
    assert names.is_finished(last_on_gpu) and last_on_gpu[names.ENSEMBLE_SIZE] == 2.0
    expected = last_on_cpu[names.LOSS]
    assert last_on_gpu[names.LOSS] == pytest.approx(expected, rel=EPOCH_LOSS_RTOL_IEEE)


def test_the_training_command_on_the_device_resumes_on_the_cpu(
    tiny_world: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "run.pt"
    args = ["--data", str(tiny_world), "--hidden-size", "8", "--batch-size", "32",
            "--semantic-every", "0", "--threads", "1", "--json",
            "--checkpoint", str(state)]  # fmt: skip
    assert train_main([*args, "--epochs", "1", "--device", DEVICE_NAME]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["epoch"] for line in lines] == [0, 1]
    assert train_main([*args, "--epochs", "2", "--device", "cpu"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["epoch"] for line in lines] == [2] and names.is_finished(lines[0])
    encoder = SentenceEncoder.load(state, device=DEVICE_NAME)
    assert np.isfinite(encoder.encode(SENTENCES)).all()


# -- SentenceEncoder and trainables.encode ----------------------------------------------------


def test_a_model_saved_on_the_gpu_loads_on_the_cpu(gpu_model: Path, device: torch.device) -> None:
    raw = torch.load(gpu_model, weights_only=True, map_location=None)  # as it was saved
    assert_on(device, list(tensors(raw["snapshots"])), "the saved weights")
    encoder = SentenceEncoder.load(gpu_model, device="cpu")
    assert_on(torch.device("cpu"), [p for m in encoder.models for p in m.parameters()], "CPU")
    assert np.isfinite(encoder.encode(SENTENCES)).all()


def test_sentence_encoder_on_the_device_agrees_with_the_cpu(
    gpu_model: Path, data: TrainingData, device: torch.device
) -> None:
    reference = SentenceEncoder.load(gpu_model, device="cpu")
    encoder = SentenceEncoder.load(gpu_model, device=DEVICE_NAME)
    assert encoder.device.type == device.type
    if ON_GPU:
        assert encoder.device.index is not None, encoder.device
    assert_on(device, [p for m in encoder.models for p in m.parameters()], "the encoder")
    sentences = [*SENTENCES, *data.test.captions[:40]]
    devices = (device, "cpu")
    expected = reference.encode(sentences)
    for batch_size in (0, 3):  # by device (one batch), and batches of 3 (another order)
        got = encoder.encode(sentences, batch_size=batch_size)
        assert got.dtype == np.float32 and got.shape == (len(sentences), encoder.embedding_dim)
        same = None if batch_size == 0 else False
        assert_close(got, expected, devices=devices, same_kernels=same, err_msg=f"{batch_size}")
    images = data.test.features
    assert_close(encoder.encode_images(images), reference.encode_images(images), devices=devices)
    similarity = encoder.similarity(SENTENCES[:2], SENTENCES)
    assert_close(similarity, reference.similarity(SENTENCES[:2], SENTENCES), devices=devices)


def test_the_encode_command_on_the_device_agrees_with_the_cpu(
    gpu_model: Path, device: torch.device, tmp_path: Path
) -> None:
    expected = SentenceEncoder.load(gpu_model, device="cpu").encode(SENTENCES)
    joint = SentenceEncoder.load(gpu_model, device="cpu").encode(SENTENCES, space="joint")
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    base = ["--model", str(gpu_model), "--input", str(sentences)]
    # what: (options, the device they run on, the CPU's embeddings, the same batches)
    choices = {
        "--device cuda": (["--device", DEVICE_NAME], DEVICE_NAME, expected, True),
        "--device cuda:0": (["--device", str(device)], str(device), expected, True),
        "the default device (auto)": ([], "auto", expected, True),
        "batches of 2, joint space": (["--device", DEVICE_NAME, "--batch-size", "2",
                                       "--space", "joint"], DEVICE_NAME, joint, False),
    }  # fmt: skip
    for what, (options, where, reference, batches) in choices.items():
        output = tmp_path / "embeddings.npy"
        output.unlink(missing_ok=True)
        assert encode_main([*base, "--output", str(output), *options]) == 0, what
        got = np.load(output)
        assert got.shape == reference.shape, what
        same = None if batches else False
        assert_close(got, reference, devices=(where, "cpu"), same_kernels=same, err_msg=what)


# -- SentEval's relatedness protocol and the retrieval metrics --------------------------------


def learnable_task(
    seed: int, name: str = "SICK-R", sizes: tuple[int, int, int] = (300, 80, 200), dim: int = 12
) -> tuple[SupervisedTask, dict[str, np.ndarray]]:
    """Random sentence vectors; gold scores a linear function of ``[|u - v|, u * v]``
    mapped onto the task's range (SICK-R 1-5, STS-B 0-5): the classifier's dev Pearson
    still rises every round, so every device keeps the same round."""
    rng = np.random.default_rng(seed)
    weights = rng.normal(size=2 * dim)
    vectors: dict[str, np.ndarray] = {}
    splits = []
    for split, n in zip(("train", "dev", "test"), sizes, strict=True):
        s1 = tuple(f"{name} {split} {i} a" for i in range(n))
        s2 = tuple(f"{name} {split} {i} b" for i in range(n))
        u, v = rng.normal(size=(n, dim)), rng.normal(size=(n, dim))
        vectors.update(zip(s1 + s2, np.concatenate([u, v]).astype(np.float32), strict=True))
        splits.append((split, s1, s2, np.c_[np.abs(u - v), u * v] @ weights))
    scores = np.concatenate([score for *_, score in splits])
    score_range = (1.0, 5.0) if name == "SICK-R" else (0.0, 5.0)
    low, high = score_range
    train, dev, test = (
        SentencePairs(
            f"{name}/{split}", s1, s2, low + (high - low) * (y - scores.min()) / np.ptp(scores)
        )
        for split, s1, s2, y in splits
    )
    return SupervisedTask(name, train, dev, test, score_range=score_range), vectors


def table_on(where: str | torch.device, *vector_sets: dict[str, np.ndarray]) -> EmbeddingTable:
    """A lookup of fixed sentence vectors, on ``where`` (as a trained model's would be)."""
    rows = [s for vectors in vector_sets for s in vectors]
    stacked = np.stack([v for vectors in vector_sets for v in vectors.values()])
    return EmbeddingTable(rows, torch.from_numpy(stacked).to(where))


# SentEval's protocol at a cheap size (4 rounds of 10 epochs), each way it can run on CUDA
ENGINES = {
    "batched_cuda_graphs": RelatednessProtocol(epochs_per_round=10, max_epoch=30),
    "batched_eager": RelatednessProtocol(epochs_per_round=10, max_epoch=30, cuda_graph=False),
    "loop": RelatednessProtocol(epochs_per_round=10, max_epoch=30, fit=fit_loop),
}


@pytest.mark.parametrize("engine", list(ENGINES))
def test_the_relatedness_protocol_on_the_device_agrees_with_the_cpu(
    engine: str, device: torch.device
) -> None:
    """A battery's two tasks together (their epochs of different lengths), on the device:
    the same predictions every time, each task's as it gets alone, and the CPU's."""
    protocol = ENGINES[engine]
    sick, sick_vectors = learnable_task(0)
    stsb, stsb_vectors = learnable_task(1, "STS-B", sizes=(200, 60, 100))
    there = table_on(device, sick_vectors, stsb_vectors)
    assert there(["SICK-R train 0 a"]).device.type == device.type
    tasks = [sick, stsb]
    got = predict_relatedness_tasks(there, tasks, device=device, protocol=protocol)
    again = predict_relatedness_tasks(there, tasks, device=device, protocol=protocol)
    on_cpu = table_on("cpu", sick_vectors, stsb_vectors)
    expected = predict_relatedness_tasks(on_cpu, tasks, protocol=protocol)
    for task in tasks:
        assert np.array_equal(got[task.name], again[task.name]), task.name  # deterministic
        assert_close(got[task.name], expected[task.name], devices=(device, "cpu"),
                     dtype=torch.float32, err_msg=task.name)  # fmt: skip
    alone = predict_relatedness(there, sick, device=device, protocol=protocol)
    bound = REORDERED[torch.float32]  # alone or beside another task: rounding only
    np.testing.assert_allclose(alone, got["SICK-R"], rtol=bound.rtol, atol=bound.atol)
    scores = supervised_relatedness_tasks(there, tasks, device=DEVICE_NAME, protocol=protocol)
    assert scores["sickr_pearson"] > 0.5 and scores["stsb_pearson"] > 0.5, scores  # learned


def test_retrieval_metrics_on_the_device_equal_the_cpus(
    device: torch.device, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Integer-valued embeddings: every score is an exact small integer in fp32 (and in
    TF32) whatever the summation order, so the ranks, ties included, are equal exactly."""
    rng = np.random.default_rng(0)
    images = rng.integers(-3, 4, size=(40, 6)).astype(np.float32)
    captions = (np.repeat(images, 5, axis=0) + rng.integers(-2, 3, size=(200, 6))).astype(
        np.float32
    )
    on_cpu = retrieval_metrics_with_ci(torch.from_numpy(images), torch.from_numpy(captions))
    there = torch.from_numpy(images).to(device), torch.from_numpy(captions).to(device)
    assert retrieval_metrics_with_ci(*there) == on_cpu
    assert retrieval_metrics(there[0], captions) == retrieval_metrics(images, captions)
    folds = coco_1k(*there, folds=4)
    assert folds == coco_1k(images, captions, folds=4)
    monkeypatch.setattr(metrics, "SCORE_MATRIX_BYTES", 0)  # the chunked functions
    for chunk_size in (7, 1024):
        assert retrieval_metrics(*there, chunk_size=chunk_size) == retrieval_metrics(
            images, captions
        )
    if ON_GPU:
        with pytest.raises(ValueError, match="image_emb is on cuda"):
            retrieval_metrics(there[0], torch.from_numpy(captions))


# -- the device string "cuda" everywhere ------------------------------------------------------


def test_the_device_string_cuda_works_everywhere(
    data: TrainingData, benchmark: SemanticBenchmark, gpu_model: Path, device: torch.device
) -> None:
    """``"cuda"`` without an index, wherever a user can give it (the command lines: the
    tests above), resolves to the device and puts everything there."""
    resolved = resolve_device(DEVICE_NAME)
    if ON_GPU:
        assert resolved.index is not None, resolved
    config = tiny(DEVICE_NAME, semantic_every=1, epochs=1)
    trainer = Trainer(config, data)
    assert trainer.device == resolved
    assert_on(device, model_tensors(trainer), "Trainer")
    semantic = make_semantic(benchmark, config.evaluation, config.run)
    assert semantic is not None and semantic.test.device == resolved
    state = checkpoint.load_training_state(trainer.save_checkpoint(), DEVICE_NAME)
    assert_on(device, list(tensors(state["model"])), "load_training_state")
    models = load_ensemble(gpu_model).models(DEVICE_NAME)
    assert_on(device, [p for m in models for p in m.parameters()], "EnsembleWeights.models")
    encoder = SentenceEncoder.load(gpu_model, device=DEVICE_NAME)
    assert encoder.device == resolved
    task, vectors = learnable_task(2)
    scores = supervised_relatedness_tasks(table_on("cpu", vectors), [task], device=DEVICE_NAME,
                                          protocol=FAST)  # fmt: skip
    assert np.isfinite(scores["sickr_pearson"])
    images = torch.eye(4, device=DEVICE_NAME)
    assert retrieval_metrics(images, images.repeat_interleave(5, dim=0))["c2i_r1"] == 100.0


# -- packed trials under the memory cap -------------------------------------------------------

# One packed trial: its process capped to a share of the GPU's memory as Ray's fractional
# trials and bench/bench_packing.py cap theirs, then a short Trainer run. Prints JSON.
TRIAL = """
import json, sys
import torch
from trainables import names
from trainables.config import TrainConfig
from trainables.data import TrainingData
from trainables.device import resolve_device
from trainables.loop import Trainer

name, store, share, seed = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
device = resolve_device(name)
if device.type == "cuda":
    torch.cuda.set_per_process_memory_fraction(share, device)
config = TrainConfig(hidden_size=64, batch_size=32, epochs=1, snapshot_interval=1,
                     ensemble_size=1, semantic_every=0, threads=1, device=name, seed=seed)
final = list(Trainer(config, TrainingData.from_store(store)).run())[-1]
out = {"device": str(device), "loss": final[names.LOSS], "finished": names.is_finished(final)}
if device.type == "cuda":
    total = torch.cuda.get_device_properties(device).total_memory
    out.update(total=total, peak=torch.cuda.max_memory_reserved(device))
    try:  # more than the whole share at once: the cap refuses it
        torch.empty(int(share * total) + 2**20, dtype=torch.uint8, device=device)
        out["over_share"] = "allocated"
    except torch.cuda.OutOfMemoryError:
        out["over_share"] = "refused"
print(json.dumps(out))
"""
SHARE = 0.25  # four trials per GPU, as --gpus-per-trial 0.25


def test_packed_trials_stay_under_their_memory_share(tiny_world: Path) -> None:
    path = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-c", TRIAL, DEVICE_NAME, str(tiny_world), str(SHARE)]
    trials = [  # started together: packed on the one device
        subprocess.Popen(
            [*command, str(seed)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in range(2)
    ]
    reports = []
    for trial in trials:
        out, err = trial.communicate(timeout=240)
        assert trial.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    for report in reports:
        assert report["finished"] and np.isfinite(report["loss"]), report
        if ON_GPU:
            assert report["device"].startswith("cuda:"), report
            assert 0 < report["peak"] <= SHARE * report["total"], report
            assert report["over_share"] == "refused", report


# -- the group's own needs --------------------------------------------------------------------

# Imports the group's modules with Ray, MLflow and Optuna made unimportable.
WITHOUT = """
import importlib.abc, sys

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("ray", "mlflow", "optuna"):
            raise ImportError(f"the GPU test group imported {name}")
        return None

sys.meta_path.insert(0, Refuse())
import tests.conftest, tests.storage.test_gpu, tests.trainables.test_gpu
print(sorted(m for m in sys.modules if m.split(".")[0] in ("ray", "mlflow", "optuna")))
"""


def test_the_group_needs_no_ray_mlflow_or_optuna() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-c", WITHOUT]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"
