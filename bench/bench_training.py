"""Training throughput of ``trainables.loop.Trainer`` against a straightforward loop.

Captions/s of the paper model (n=1024, attention) at batch 32 and 128,
the Trainer's own step (``Trainer.train_batches``, the code path of
``train_one_epoch``) against a reference loop written here the plain way: per batch
the captions are sorted by length and gathered on the CPU, copied to the device with
their image features, packed with ``pack_padded_sequence``, run in fp32, and the loss
is read with ``.item()`` every step. Both train the same model class with the same loss,
optimiser, schedule and clipping, from the same seed; the two are timed alternately,
best of ``--repeats``. On CUDA it also reports ``torch.cuda.max_memory_allocated``.

With ``--flickr8k``: the paper's Flickr8k-sized run, 6,000 training images x 5
captions of the embedded world, 32 epochs of batch 32 with the dev retrieval and
semantic evaluation after every epoch. On a GPU the whole run is timed; on a CPU it is
estimated from ``--steps`` timed steps and one timed evaluation (and says so).

    python bench/bench_training.py                      # n=1024, batch 32 and 128
    python bench/bench_training.py --hidden-size 256 --steps 10   # a quicker CPU run
    python bench/bench_training.py --flickr8k           # item 3
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

if not __package__:  # run as a file: the repository first on sys.path (see bench/__init__.py)
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from bench import _common
from bench._cli import BadInput, entry, parser
from bench._timing import profile, time_alternately
from storage import FeatureStore
from trainables.config import TrainConfig
from trainables.data import EncodedSplit, TrainingData, epoch_batches
from trainables.loop import Trainer
from trainables.loss import make_loss
from trainables.model import PAD_INDEX, CaptionEncoder, GroundedEncoder
from trainables.schedule import cyclic_cosine_lr
from trainables.semantic import make_semantic


class ReferenceLoop:
    """The straightforward training loop, for comparison only."""

    def __init__(self, config: TrainConfig, split: EncodedSplit, device: torch.device) -> None:
        torch.manual_seed(config.seed)
        self.config, self.split, self.device = config, split, device
        self.model = GroundedEncoder(config, split.features.shape[1]).to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr_min)
        self.loss_fn = make_loss(config)
        self.cycle = 5 * (split.num_images // config.batch_size) * config.cycle_epochs
        self.step = 0

    def _caption_embeddings(self, chars: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        encoder = self.model.caption_encoder
        assert isinstance(encoder, CaptionEncoder)  # the char RNN: the only one compared
        packed = pack_padded_sequence(encoder.embedding(chars), lengths, batch_first=True)
        states, _ = pad_packed_sequence(encoder.rnn(packed)[0], batch_first=True)
        mask = chars != PAD_INDEX
        if encoder.attention is not None:
            pooled = encoder.attention(states, mask)
        else:
            pooled = states.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(dim=1)
        return F.normalize(pooled, dim=-1)

    def train_batches(self, plan: np.ndarray) -> list[float]:
        cfg, split = self.config, self.split
        self.model.train()
        losses = []
        for rows in plan:
            lr = cyclic_cosine_lr(self.step, self.cycle, cfg.lr_min, cfg.lr_max)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            lengths = split.lengths[rows]
            order = np.argsort(-lengths, kind="stable")  # packing wants longest first
            rows, lengths = rows[order], lengths[order]
            chars = torch.from_numpy(split.tokens[rows, : lengths[0]]).long().to(self.device)
            features = torch.from_numpy(split.features[rows // 5]).to(self.device)
            images = self.model.image_encoder(features)
            captions = self._caption_embeddings(chars, torch.from_numpy(lengths))
            loss = self.loss_fn(images, captions)
            self.optimizer.zero_grad()
            loss.backward()
            if cfg.clip_image > 0:
                torch.nn.utils.clip_grad_norm_(
                    self.model.image_encoder.parameters(), cfg.clip_image
                )
            if cfg.clip_caption > 0:
                torch.nn.utils.clip_grad_norm_(
                    self.model.caption_encoder.parameters(), cfg.clip_caption
                )
            self.optimizer.step()
            losses.append(loss.item())
            self.step += 1
        return losses


def throughput(args: argparse.Namespace, data: TrainingData, device: torch.device) -> None:
    print(
        f"item 1: n={args.hidden_size}, {args.pooling} pooling, {args.rnn_type}, "
        f"{data.train.num_images:,} training images, {args.steps} timed steps per run, "
        f"best of {args.repeats}, {_common.machine(device)}"
    )
    print("batch  loop       captions/s  s/step   peak GPU MiB  ratio")
    for batch_size in args.batch_sizes:
        compare(args, data, device, batch_size)


def compare(
    args: argparse.Namespace, data: TrainingData, device: torch.device, batch_size: int
) -> None:
    """Print both loops' captions/s at ``batch_size``."""
    config = TrainConfig(
        hidden_size=args.hidden_size,
        pooling=args.pooling,
        rnn_type=args.rnn_type,
        batch_size=batch_size,
        device=str(device),
        semantic_every=0,
    )
    plan = epoch_batches(data.train.num_images, batch_size, config.seed, 0)
    if len(plan) < args.steps + 1:
        raise BadInput(f"error: --images: {len(plan)} steps per epoch at batch {batch_size}, "
                       f"fewer than --steps + 1 ({args.steps + 1})")  # fmt: skip
    trainer = Trainer(config, data)
    reference = ReferenceLoop(config, data.train, device)
    trainer.train_batches(plan[:1]).cpu()  # warm-up: allocator, cuDNN plans, threads
    reference.train_batches(plan[:1])
    timed = plan[1 : 1 + args.steps]
    runs: dict[str, Callable[[], object]] = {
        "reference": lambda: reference.train_batches(timed),
        "trainer": lambda: trainer.train_batches(timed).cpu(),
    }
    best, peak = time_alternately(runs, device, args.repeats)
    if args.profile:
        profile(runs["trainer"], device)
    for name in runs:
        rate = args.steps * batch_size / best[name]
        print(
            f"{batch_size:>5}  {name:<9} {rate:>11.1f}  {best[name] / args.steps:7.3f}"
            f"  {peak[name]:>12.0f}  {best['reference'] / best[name]:5.2f}"
        )


def flickr8k(args: argparse.Namespace, data: TrainingData, store: str) -> None:
    config = TrainConfig(
        hidden_size=args.hidden_size, batch_size=32, epochs=args.epochs, device=args.device
    )
    senteval = FeatureStore.open(store).manifest.extras.get("senteval")
    semantic = (
        make_semantic(f"{store}/{senteval}", config.evaluation, config.run) if senteval else None
    )
    trainer = Trainer(config, data, semantic)
    device = trainer.device
    print(
        f"item 3: n={config.hidden_size}, attention, batch 32, {config.epochs} epochs, "
        f"{data.train.num_images:,} training / {data.val.num_images:,} dev images, "
        f"semantic evaluation {'every epoch' if semantic else 'absent'}; "
        f"{_common.machine(device)}"
    )
    if device.type == "cuda" and not args.estimate:
        started = time.perf_counter()
        train_s = eval_s = 0.0
        for metrics in trainer.run():
            train_s += metrics.get("time/train_s", 0.0)
            eval_s += metrics["time/eval_s"]
        total = time.perf_counter() - started
        print(
            f"whole run {total:.1f} s ({total / 60:.2f} min; goal <= 3 min): training "
            f"{train_s:.1f} s, per-epoch evaluation {eval_s:.1f} s, peak GPU "
            f"{torch.cuda.max_memory_allocated(device) / 2**20:,.0f} MiB"
        )
        return
    started = time.perf_counter()
    trainer.evaluate_epoch({})
    eval_s = time.perf_counter() - started
    plan = epoch_batches(data.train.num_images, 32, config.seed, 0)
    trainer.train_batches(plan[:1]).cpu()
    started = time.perf_counter()
    trainer.train_batches(plan[1 : 1 + args.steps]).cpu()
    step_s = (time.perf_counter() - started) / args.steps
    epoch_s = len(plan) * step_s
    total = (config.epochs + 1) * eval_s + config.epochs * epoch_s + eval_s  # + ensemble
    print(
        f"ESTIMATE (not a whole run): {args.steps} timed steps of {len(plan)} per epoch "
        f"-> {step_s:.3f} s/step, {epoch_s:.0f} s/epoch; one evaluation {eval_s:.1f} s; "
        f"{config.epochs} epochs + {config.epochs + 2} evaluations ~ {total:.0f} s "
        f"({total / 60:.1f} min; goal <= 3 min on an H200)"
    )


@entry
def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--store", default=None, help="default: the embedded world, built once")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--hidden-size", type=int, default=1024, help="the model's n")
    p.add_argument("--pooling", default="attention", help="the caption encoder's pooling")
    p.add_argument("--rnn-type", default="gru", help="gru or lstm")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 128],
                   help="captions per step, one comparison each")  # fmt: skip
    p.add_argument("--images", type=int, default=6000, help="training images used")
    p.add_argument("--steps", type=int, default=None, help="default: 100 GPU, 6 CPU")
    p.add_argument("--repeats", type=int, default=3, help="best of this many rounds")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's own)")
    p.add_argument("--profile", action="store_true", help="profile the Trainer's steps")
    p.add_argument("--flickr8k", action="store_true", help="item 3: the paper's run")
    p.add_argument("--epochs", type=int, default=32, help="--flickr8k: epochs")
    p.add_argument("--estimate", action="store_true",
                   help="--flickr8k: estimate from steps on a GPU too")  # fmt: skip
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = _common.device(args.device)
    args.steps = args.steps or (100 if device.type == "cuda" else 6)
    store = _common.world(args.store, 10_000)  # 8,000 / 1,000 / 1,000 images
    if args.flickr8k:
        flickr8k(args, _common.load(store, 6000, 1000), store)
    else:
        throughput(args, _common.load(store, args.images), device)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
