"""Evaluation speed (issue 7, item 4).

(a) ``trainables.metrics.retrieval_metrics`` at MSCOCO-5k size (5,000 images x 25,000
captions, dim 2,048 = the paper model's 2n) against a per-query Python loop: for each
caption, its similarities to every image and the rank of its own image; for each image,
its similarities to every caption and the best rank of its own five. Goal: >= 20x. The
embeddings are multiples of 1/64 with small numerators, so every dot product is exact
in float32 whatever the summation order, and the two must agree rank for rank.

(b) The per-epoch evaluation as the Trainer runs it against one epoch's training, at the
paper's settings (n=1024, attention, batch 32, 6,000 training images of the embedded
world, 1,000 dev and 1,000 test images, and its semantic sets). Every epoch evaluates
dev retrieval, the dev semantic score (cosine on STS-B dev and SICK-R trial) and test
retrieval; every ``--semantic-every`` epochs (default 4, the paper's cycle length) also
the test battery (STS12-16, the supervised STS-B and SICK-R, cosine on their test pairs).
The share is the evaluation averaged over those epochs, against the epoch's training
time (``steps per epoch x`` the best time per step of ``--steps`` timed steps). Goal:
evaluation <= 10% of an epoch.

    python bench/bench_eval.py                       # both
    python bench/bench_eval.py --part retrieval
    python bench/bench_eval.py --part epoch --hidden-size 1024   # the paper's n on a CPU

On a CPU part (b) defaults to n=256: at n=1024 one evaluation (42k semantic sentences)
takes about ten minutes on two cores.
"""

from __future__ import annotations

import argparse
import math
import time

import _common
import numpy as np
import torch

from storage import FeatureStore
from trainables import names
from trainables.config import TrainConfig
from trainables.data import epoch_batches
from trainables.loop import Trainer
from trainables.metrics import retrieval_metrics, retrieval_ranks, summarise_ranks
from trainables.semantic import make_semantic


def exact_embeddings(images: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Image and caption embeddings (five noisy copies per image, noisy enough for R@1
    well below 100%) whose dot products are exact in float32: integers over 64, each
    product below 2^11 / 4096, so a sum over 2,048 dimensions stays below 2^24 / 4096."""
    rng = np.random.default_rng(seed)
    image_emb = rng.integers(-8, 9, size=(images, dim))
    noise = rng.integers(-120, 121, size=(5 * images, dim))
    caption_emb = np.repeat(image_emb, 5, axis=0) + noise
    return (image_emb / 64).astype(np.float32), (caption_emb / 64).astype(np.float32)


def per_query_ranks(images: np.ndarray, captions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The reference: one query at a time (rank = 1 + #wrong candidates scoring at least
    the correct one's score)."""
    c2i = np.empty(len(captions), dtype=np.int64)
    for j, query in enumerate(captions):
        scores = images @ query
        c2i[j] = np.count_nonzero(scores >= scores[j // 5])  # the correct image included
    i2c = np.empty(len(images), dtype=np.int64)
    for i, query in enumerate(images):
        scores = captions @ query
        own = scores[5 * i : 5 * i + 5]
        i2c[i] = 1 + np.count_nonzero(scores >= own.max()) - np.count_nonzero(own >= own.max())
    return c2i, i2c


def retrieval(args: argparse.Namespace, device: torch.device) -> None:
    image_np, caption_np = exact_embeddings(args.images, args.dim)
    image_emb = torch.from_numpy(image_np).to(device)
    caption_emb = torch.from_numpy(caption_np).to(device)
    print(
        f"(a) retrieval metrics, {args.images:,} images x {5 * args.images:,} captions, "
        f"dim {args.dim}, float32; fast on {_common.machine(device)}; per-query loop in "
        f"numpy on the CPU"
    )
    retrieval_metrics(image_emb, caption_emb)  # warm-up
    best = {"per-query loop": math.inf, "retrieval_metrics": math.inf}
    reference = None
    for repeat in range(args.repeats):
        if repeat < args.reference_repeats:
            started = time.perf_counter()
            reference = per_query_ranks(image_np, caption_np)
            best["per-query loop"] = min(best["per-query loop"], time.perf_counter() - started)
        _common.sync(device)
        started = time.perf_counter()
        retrieval_metrics(image_emb, caption_emb)
        _common.sync(device)
        best["retrieval_metrics"] = min(best["retrieval_metrics"], time.perf_counter() - started)
    assert reference is not None
    c2i, i2c = retrieval_ranks(image_emb, caption_emb)
    same = np.array_equal(c2i, reference[0]) and np.array_equal(i2c, reference[1])
    metrics = summarise_ranks(c2i, i2c)
    print(
        f"ranks identical: {same}; c2i R@1/5/10 {metrics['c2i_r1']:.1f}/{metrics['c2i_r5']:.1f}"
        f"/{metrics['c2i_r10']:.1f}, i2c R@1 {metrics['i2c_r1']:.1f}"
    )
    for name, seconds in best.items():
        print(f"{name:<18} {seconds:8.2f} s  ratio {best['per-query loop'] / seconds:6.1f}")
    print("goal: >= 20x")
    if not same:
        raise SystemExit("the fast metrics disagree with the per-query reference")


def epoch_share(args: argparse.Namespace, device: torch.device) -> None:
    store = _common.world(args.store, 10_000)
    data = _common.load(store, 6000, 1000)
    senteval = FeatureStore.open(store).manifest.extras.get("senteval")
    every = args.semantic_every
    config = TrainConfig(
        hidden_size=args.hidden_size, batch_size=32, device=str(device), semantic_every=every
    )
    semantic = make_semantic(f"{store}/{senteval}", config)
    assert semantic is not None
    trainer = Trainer(config, data, semantic)
    plan = epoch_batches(data.train.num_images, config.batch_size, config.seed, 0)
    print(
        f"(b) per-epoch evaluation vs training: n={config.hidden_size}, attention, batch 32, "
        f"{data.train.num_images:,} training images ({len(plan)} steps per epoch), "
        f"{data.val.num_images:,} dev and {data.test.num_images:,} test images, "
        f"{len(semantic.dev.sentences):,} dev semantic sentences every epoch, "
        f"{len(semantic.test.sentences):,} test battery sentences every {every} epochs; "
        f"{args.steps} timed steps per round, best of {args.repeats}; {_common.machine(device)}"
    )
    trainer.train_batches(plan[:1]).cpu()  # warm-up
    best = {"step": math.inf, "every epoch": math.inf, "battery epoch": math.inf}
    for repeat in range(args.repeats):
        _common.sync(device)
        started = time.perf_counter()
        trainer.train_batches(plan[1 + repeat * args.steps : 1 + (repeat + 1) * args.steps]).cpu()
        best["step"] = min(best["step"], (time.perf_counter() - started) / args.steps)
        for name, epoch in (("every epoch", every + 1), ("battery epoch", every)):
            trainer.epoch = epoch  # the battery is due when epoch % semantic_every == 0
            started = time.perf_counter()
            metrics = trainer.evaluate_epoch({})
            best[name] = min(best[name], time.perf_counter() - started)
    epoch_s = len(plan) * best["step"]
    battery = best["battery epoch"] - best["every epoch"]
    average = best["every epoch"] + battery / every
    print(
        f"training: {best['step']:.3f} s/step -> {epoch_s:.1f} s per epoch\n"
        f"every epoch (dev retrieval, dev semantic, test retrieval): "
        f"{best['every epoch']:.2f} s = {100 * best['every epoch'] / epoch_s:.1f}%\n"
        f"test battery: {battery:.2f} s = {100 * battery / epoch_s:.1f}% of an epoch, "
        f"every {every} epochs\n"
        f"evaluation averaged over {every} epochs: {average:.2f} s = "
        f"{100 * average / epoch_s:.1f}% of an epoch (goal <= 10%)"
    )
    print(f"(dev R@10 mean {metrics[names.PRIMARY_RETRIEVAL]:.1f}, an untrained-ish model)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=("retrieval", "epoch", "both"), default="both")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--images", type=int, default=5000, help="(a) images (5 captions each)")
    parser.add_argument("--dim", type=int, default=2048, help="(a) embedding size")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reference-repeats", type=int, default=1, help="(a) per-query runs")
    parser.add_argument("--store", default=None, help="(b) default: the embedded world")
    parser.add_argument(
        "--hidden-size", type=int, default=None, help="(b) default: 1024 GPU, 256 CPU"
    )
    parser.add_argument("--steps", type=int, default=None, help="(b) default: 100 GPU, 4 CPU")
    parser.add_argument(
        "--semantic-every", type=int, default=4, help="(b) epochs between test batteries"
    )
    args = parser.parse_args()
    device = _common.device(args.device)
    args.steps = args.steps or (100 if device.type == "cuda" else 4)
    args.hidden_size = args.hidden_size or (1024 if device.type == "cuda" else 256)
    if args.part in ("retrieval", "both"):
        retrieval(args, device)
    if args.part in ("epoch", "both"):
        epoch_share(args, device)


if __name__ == "__main__":
    _common.run(main)
