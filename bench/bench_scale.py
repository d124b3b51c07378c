"""The embedded world at MSCOCO size (BENCHMARKS.md, "Embedded world at COCO size"): one
training epoch's time and the peak memory, on the CPU or a GPU.

The world (123,287 images, 616,435 captions, split 80/10/10 like every embedded world)
is built once with ``python -m storage.build synthetic
--images 123287`` under ``--dir`` (about a minute and 1.3 GB), or taken from ``--store``.
The timed part reads the store (``TrainingData.from_store``: features, captions encoded
to characters), builds the ``Trainer`` (data moved to the device) and trains; with
``--max-steps`` only that many steps of the epoch run and the epoch's time is
extrapolated from them (the output says so); ``--evaluate`` adds one dev retrieval
evaluation (12,329 images). Peak memory: this process's peak RSS
(``getrusage``) and, on CUDA, ``torch.cuda.max_memory_allocated``. Feature loading at
>= 50% of ``np.load`` is ``bench/bench_store_read.py``'s measurement (BENCHMARKS.md).

    python bench/bench_scale.py                                   # n=1024, whole epoch
    python bench/bench_scale.py --hidden-size 64 --max-steps 50   # a CPU estimate
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

if not __package__:  # run as a file: the repository first on sys.path (see bench/__init__.py)
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import torch

from bench import _common
from bench._cli import entry, parser
from trainables.config import TrainConfig
from trainables.data import epoch_batches
from trainables.loop import Trainer


@entry
def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--store", default=None, help="an existing COCO-sized store")
    p.add_argument("--dir", default="/tmp", help="where to build the world (not the repo)")
    p.add_argument("--images", type=int, default=123_287, help="the world's size")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--hidden-size", type=int, default=1024, help="the model's n")
    p.add_argument("--batch-size", type=int, default=128, help="captions per step")
    p.add_argument("--max-steps", type=int, default=0, help="0: the whole epoch")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's own)")
    p.add_argument("--evaluate", action="store_true", help="time one dev evaluation")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = _common.device(args.device)
    store = _common.world(args.store, args.images, args.dir)
    started = time.perf_counter()
    data = _common.load(store, None)
    read_s = time.perf_counter() - started
    config = TrainConfig(
        hidden_size=args.hidden_size,
        batch_size=args.batch_size,
        device=str(device),
        semantic_every=0,
    )
    trainer = Trainer(config, data)
    setup_s = time.perf_counter() - started
    rss_loaded = _common.peak_rss_mib()
    plan = epoch_batches(data.train.num_images, config.batch_size, config.seed, 0)
    steps = min(args.max_steps or len(plan), len(plan))
    print(
        f"item 7: {store}: {data.train.num_images:,} / {data.val.num_images:,} / "
        f"{data.test.num_images:,} images, {len(data.train.captions):,} training captions "
        f"(max {data.train.tokens.shape[1]} characters); n={config.hidden_size}, batch "
        f"{config.batch_size}, {len(plan):,} steps per epoch; {_common.machine(device)}"
    )
    print(
        f"store read and encoded {read_s:.1f} s; trainer built (data on {device}) "
        f"{setup_s:.1f} s; peak RSS so far {rss_loaded:,.0f} MiB"
    )
    started = time.perf_counter()
    losses = trainer.train_batches(plan[:steps]).cpu()
    _common.sync(device)
    train_s = time.perf_counter() - started
    epoch_s = train_s * len(plan) / steps
    what = "measured" if steps == len(plan) else f"EXTRAPOLATED from {steps} steps"
    print(
        f"training: {steps:,} steps in {train_s:.1f} s ({steps * config.batch_size / train_s:,.0f}"
        f" captions/s); one epoch {epoch_s:,.0f} s ({epoch_s / 60:.1f} min, {what}); "
        f"last loss {float(losses[-1]):.2f}"
    )
    if args.evaluate:
        started = time.perf_counter()
        trainer.evaluate_epoch({})
        print(
            f"dev retrieval ({data.val.num_images:,} images) {time.perf_counter() - started:.1f} s"
        )
    line = f"peak RSS {_common.peak_rss_mib():,.0f} MiB"
    if device.type == "cuda":
        line += f", peak GPU {torch.cuda.max_memory_allocated(device) / 2**20:,.0f} MiB"
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
