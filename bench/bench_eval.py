"""Evaluation speed (BENCHMARKS.md, "Training and evaluation speed").

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
takes about ten minutes on two cores. Part (b) evaluates in place (the battery computed
in the training thread, not in the Trainer's background worker:
``bench/_in_place_battery.py``), with the default regression engine (``--engine``).

(c) The test battery off the critical path (BENCHMARKS.md, "The test battery off the
critical path"), with today's path as the baseline in the same run. First the battery
alone, on the untrained model's embeddings: embedding its sentences, then scoring them
(STS12-16 cosines and the supervised SICK-R and STS-B regressions) with the reference
regression loop (``bench/_relatedness_loop.py``: one 64-row step per Python iteration, a
task at a time: the first path) and with the batched one (the two tasks stacked, on the device, CUDA
graphs on a GPU); both on the same seed and shuffles, so their SICK-R / STS-B numbers
agree to rounding. On a CPU the sentences are embedded both ways: padded (the earlier
paths) and packed (the library's own path: no padding, the training
recurrence, each fixed set packed once). Then ``--epochs`` epochs (and the snapshot
ensemble at the end) four ways, each from the same fresh model: training only (no
evaluation at all), the first path (the battery in place, each in its own epoch's
report, ``bench/_in_place_battery.py``; the reference loop; its ensemble sums the
embeddings its snapshots got at their epochs, as today's does: the first path's
embedding them again is counted in ``--baseline parts`` only), today's (the battery
in a background worker started before the in-place evaluation, batched engine; padded
embeddings) and the new one (today's with the packed embeddings; on a GPU, where
nothing is packed, it is today's again). The evaluation's share of a run is (run -
training only) / run, so whatever the background worker takes from training counts as
evaluation; each run's CPU time (the process's, every thread) is printed beside it, a
figure that load on the machine disturbs less than wall time. The first path's run is
measured (``--baseline run``, the CPU's default) or put together from its measured parts
(``parts``, the GPU's default: at the paper's size each of its batteries takes half a
minute): training only + every epoch's in-place evaluation (dev and test retrieval, dev
semantic score) + each battery (embedding + reference scoring) + the ensemble's. The new
run's epochs are also extrapolated to a whole run of ``--whole-epochs`` (its first epoch,
its middle epochs' mean and its last, which waits for its battery). Today's and the new
run must report the same metrics at the same epochs, equal to the reordered-sums bound
(their largest difference is printed).

Sizes follow the device: on a GPU the paper's run (n=1024, attention, batch 32, 6,000
training and 1,000 dev images of the 10,000-image world, the battery every epoch, 3
epochs measured, extrapolated to 32); on a CPU the CPU-sized default search's trials
(``gridsearch.settings.CPU_SIZED``: n=32, batch 64, 1-epoch cycles, a snapshot every
epoch, the battery every 4th epoch, 4 epochs on the 2,000-image world, one torch thread
as a search's trial has), measured whole.

    python bench/bench_eval.py --part battery                        # the device's default
    python bench/bench_eval.py --part battery --device cuda          # the paper's run on a GPU
    python bench/bench_eval.py --part battery --device cuda --train-images 3000 --epochs 2
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

if not __package__:  # run as a file: the repository first on sys.path (see bench/__init__.py)
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import numpy as np
import torch

from bench import _common
from bench._cli import entry, parser
from bench._in_place_battery import evaluate_in_place, in_place
from bench._relatedness_loop import fit_loop
from storage import FeatureStore
from trainables import embedding, names
from trainables.config import CPU_SIZED, TrainConfig
from trainables.data import TrainingData, epoch_batches
from trainables.loop import Trainer
from trainables.metrics import retrieval_metrics, retrieval_ranks, summarise_ranks
from trainables.relatedness import RelatednessProtocol
from trainables.semantic import EmbeddingTable, SemanticEvaluation, make_semantic

# the regressions' engines: the library's, and SentEval's loop as the reference
PROTOCOLS = {"loop": RelatednessProtocol(fit=fit_loop), "batched": RelatednessProtocol()}


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
    data = _common.load(store, args.train_images or 6000, args.dev_images or 1000)
    senteval = FeatureStore.open(store).manifest.extras.get("senteval")
    every = args.semantic_every
    config = TrainConfig(
        hidden_size=args.hidden_size, batch_size=32, device=str(device), semantic_every=every
    )
    semantic = make_semantic(f"{store}/{senteval}", config.evaluation, config.run)
    assert semantic is not None
    semantic.test.protocol = PROTOCOLS[args.engine]
    trainer = in_place(Trainer(config, data, semantic))
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
            metrics = evaluate_in_place(trainer, {})
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
        f"{100 * average / epoch_s:.1f}% of an epoch (goal <= 5%)"
    )
    print(f"(dev R@10 mean {metrics[names.PRIMARY_RETRIEVAL]:.1f}, an untrained-ish model)")


def _load_average() -> str:
    try:
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "load average unknown"


def _sizes(args: argparse.Namespace, device: torch.device) -> tuple[TrainConfig, TrainingData, str]:
    """(c)'s config, data and semantic sets: the paper's run on a GPU, the CPU-sized
    default search's trial on a CPU (see the module docstring), with the flags' sizes."""
    gpu = device.type == "cuda"
    world = args.world_images or (10_000 if gpu else 2_000)
    store = _common.world(args.store, world)
    train = args.train_images or (6_000 if gpu else None)
    dev = args.dev_images or (1_000 if gpu else None)
    data = _common.load(store, train, dev)
    senteval = FeatureStore.open(store).manifest.extras.get("senteval")
    if senteval is None:
        raise _common.BadInput(f"error: --store {store}: has no semantic sets")
    sized = {} if gpu else {**CPU_SIZED, "threads": 1}
    overrides = {
        "hidden_size": args.hidden_size,
        "batch_size": args.batch_size,
        "semantic_every": args.semantic_every,
        "epochs": args.epochs,
    }
    values = {
        "hidden_size": 1024,
        "batch_size": 32,
        "semantic_every": 1,
        "epochs": 3,
        **sized,
        **{k: v for k, v in overrides.items() if v is not None},
    }
    config = TrainConfig(**values, device=str(device))
    return config, data, f"{store}/{senteval}"


def _semantic(senteval: str, config: TrainConfig, *, engine: str) -> SemanticEvaluation:
    semantic = make_semantic(senteval, config.evaluation, config.run)
    assert semantic is not None
    semantic.test.protocol = PROTOCOLS[engine]
    return semantic


@contextlib.contextmanager
def _embedding_path(packed: bool) -> Iterator[None]:
    """The CPU's embeddings packed (the library's path) or, ``packed`` False, padded (the
    reference, as on a GPU) for the block: the library's own choice, narrowed."""
    choose = embedding._packs
    if not packed:
        embedding._packs = lambda models, precision: False
    try:
        yield
    finally:
        embedding._packs = choose


def _timed_run(
    config: TrainConfig,
    data: TrainingData,
    semantic: SemanticEvaluation | None,
    device: torch.device,
    *,
    packed: bool = False,
    battery_in_place: bool = False,
) -> tuple[list[float], list[dict[str, float]], float]:
    """A fresh Trainer's epochs: the wall time of each (from the end of the one before;
    epoch 0's is its evaluation alone), its reports, and the process's CPU seconds over
    the run (all threads: the background worker's too). ``semantic`` None: training
    only, nothing evaluated. ``packed``: the CPU's packed embeddings (False: padded).
    ``battery_in_place``: each battery computed in place, in its own epoch's report
    (``bench/_in_place_battery.py``; False: the Trainer's background worker)."""
    with _embedding_path(packed):
        trainer = Trainer(config, data, semantic)
        if battery_in_place:
            in_place(trainer)
        walls: list[float] = []
        reports: list[dict[str, float]] = []
        _common.sync(device)
        cpu = time.process_time()
        started = time.perf_counter()
        if semantic is None:
            walls.append(0.0)  # epoch 0 is only evaluated
            for _ in range(config.epochs):
                trainer.train_one_epoch()
                _common.sync(device)
                walls.append(time.perf_counter() - started)
                started = time.perf_counter()
            return walls, reports, time.process_time() - cpu
        for report in trainer.run():
            _common.sync(device)
            walls.append(time.perf_counter() - started)
            reports.append(report)
            started = time.perf_counter()
        return walls, reports, time.process_time() - cpu


def _warm_up(config: TrainConfig, data: TrainingData, senteval: str) -> None:
    """Build the kernels, allocator pools and the like once, on a model thrown away."""
    trainer = Trainer(config, data, _semantic(senteval, config, engine="batched"))
    plan = epoch_batches(data.train.num_images, config.batch_size, config.seed, 0)
    trainer.train_batches(plan[:2]).cpu()
    for packed in (False, True):
        with _embedding_path(packed):
            trainer.evaluation.embed_fn([trainer.model])(["a warm-up sentence."])


def _battery_alone(
    trainer: Trainer, probe: SemanticEvaluation, device: torch.device
) -> tuple[dict[str, float], str]:
    """The battery on the untrained model: its embedding (padded, and on a CPU packed: the
    second time, as an epoch after the first finds the set packed), its scoring by each
    engine (the padded embeddings'); the seconds of each, and the engines' numbers."""
    seconds: dict[str, float] = {}
    ways = {"embed_s": False}
    if device.type == "cpu":
        ways["embed_packed_s"] = True
    table = None
    for name, packed in ways.items():
        with _embedding_path(packed):
            embed = trainer.evaluation.embed_fn([trainer.model])
            if packed:
                embed(probe.test.sentences)  # packs the set, as the first epoch does
            _common.sync(device)
            started = time.perf_counter()
            built = EmbeddingTable.build(embed, probe.test.sentences)
            _common.sync(device)
            seconds[name] = time.perf_counter() - started
            table = table or built
    assert table is not None
    scored = {}
    engines = dict(PROTOCOLS)
    if device.type == "cuda":  # what the CUDA graphs add
        engines["eager"] = RelatednessProtocol(cuda_graph=False)
    for engine, protocol in engines.items():
        probe.test.protocol = protocol
        _common.sync(device)
        started = time.perf_counter()
        scored[engine] = probe.test(table)
        _common.sync(device)
        seconds[engine] = time.perf_counter() - started
    agree = " ".join(
        f"{k} {scored['loop'][k]:.4f} / {scored['batched'][k]:.4f}"
        for k in ("sickr_pearson", "stsb_pearson")
        if k in scored["loop"]
    )
    return seconds, agree


def _in_place(trainer: Trainer, device: torch.device, packed: bool) -> float:
    """Seconds of one epoch's in-place evaluation (dev and test retrieval, the dev
    semantic score), with the sets already packed where ``packed``."""
    with _embedding_path(packed), torch.inference_mode():
        for _ in range(2 if packed else 1):  # packed: time the second, the sets packed
            started = time.perf_counter()
            evaluation = trainer.evaluation
            evaluation.retrieval(trainer.val_split, [trainer.model], names.DEV)
            evaluation.retrieval(trainer.test_split, [trainer.model], names.TEST)
            evaluation.semantic_scores([trainer.model], dev=True, battery=None)
            _common.sync(device)
            took = time.perf_counter() - started
    return took


def _without_times(reports: Sequence[dict[str, float]]) -> list[dict[str, float]]:
    """The reports without what timing decides (seconds, speeds)."""
    return [
        {k: v for k, v in r.items() if not k.startswith("time/") and k != names.CAPTIONS_PER_S}
        for r in reports
    ]


def _largest_difference(
    ours: Sequence[dict[str, float]], theirs: Sequence[dict[str, float]]
) -> tuple[bool, float, str]:
    """Whether the two runs report the same metrics at the same epochs, and their largest
    absolute difference (and its metric); timings left out."""
    mine, other = _without_times(ours), _without_times(theirs)
    same = len(mine) == len(other) and all(
        a.keys() == b.keys() for a, b in zip(mine, other, strict=False)
    )
    largest, where = 0.0, "none"
    for a, b in zip(mine, other, strict=False):
        for key in a.keys() & b.keys():
            gap = _gap(a[key], b[key])
            if gap > largest:
                largest, where = gap, f"{key} at epoch {int(a['epoch'])}"
    return same, largest, where


def _gap(a: float, b: float) -> float:
    """|a - b|; two NaNs agree, a NaN against a number is infinitely far."""
    if math.isnan(a) and math.isnan(b):
        return 0.0
    gap = abs(a - b)
    return math.inf if math.isnan(gap) else gap


def offpath(args: argparse.Namespace, device: torch.device) -> dict[str, float]:
    """(c): the battery alone, then the four runs (module docstring); returns the
    figures it printed (for the tests)."""
    config, data, senteval = _sizes(args, device)
    baseline = args.baseline or ("parts" if device.type == "cuda" else "run")
    if config.threads:
        torch.set_num_threads(config.threads)
    probe = _semantic(senteval, config, engine="batched")
    every = config.semantic_every
    print(
        f"(c) the test battery off the critical path: n={config.hidden_size}, "
        f"{config.encoder}, batch {config.batch_size}, {data.train.num_images:,} training "
        f"and {data.val.num_images:,} dev images, {len(probe.test.sentences):,} battery "
        f"sentences every {every} epoch(s), {config.epochs} epochs + the ensemble; "
        f"{_common.machine(device)}; {_load_average()}",
        flush=True,
    )
    _warm_up(config, data, senteval)

    # 1. the battery alone, on the untrained model's embeddings
    trainer = Trainer(config, data, probe)
    seconds, agree = _battery_alone(trainer, probe, device)
    embed_s = seconds["embed_s"]
    packed_note = (
        f" (packed {seconds['embed_packed_s']:.2f} s)" if "embed_packed_s" in seconds else ""
    )
    print(
        f"the battery alone: embedding {embed_s:.2f} s{packed_note}; scoring with the "
        f"reference engine (the first path) {seconds['loop']:.2f} s, batched "
        f"{seconds['batched']:.2f} s ({seconds['loop'] / seconds['batched']:.1f}x)"
        + (f", batched without CUDA graphs {seconds['eager']:.2f} s" if "eager" in seconds else "")
        + f"; loop / batched: {agree}",
        flush=True,
    )
    in_place_s = _in_place(trainer, device, packed=False)
    in_place_packed_s = _in_place(trainer, device, packed=True)
    print(
        f"one epoch's in-place evaluation (dev and test retrieval, dev semantic score): "
        f"padded {in_place_s:.2f} s, packed {in_place_packed_s:.2f} s",
        flush=True,
    )
    del trainer

    # 2. the runs
    train_walls, _, train_cpu = _timed_run(config, data, None, device)
    train_s = sum(train_walls)
    print(
        f"training only, {config.epochs} epochs: {train_s:.1f} s "
        f"({train_s / config.epochs:.2f} s per epoch), CPU {train_cpu:.1f} s; {_load_average()}",
        flush=True,
    )

    def batched() -> SemanticEvaluation:
        return _semantic(senteval, config, engine="batched")

    new_walls, new_reports, new_cpu = _timed_run(config, data, batched(), device, packed=True)
    today_walls, today_reports, today_cpu = _timed_run(config, data, batched(), device)
    batteries = sum(1 for e in range(config.epochs + 1) if e % every == 0)
    old_cpu = math.nan
    old_reports: list[dict[str, float]] = []
    if baseline == "run":
        old_semantic = _semantic(senteval, config, engine="loop")
        old_walls, old_reports, old_cpu = _timed_run(
            config, data, old_semantic, device, battery_in_place=True
        )
        old_s = sum(old_walls)
        how = "measured"
    else:
        models = min(config.ensemble_size, config.epochs // config.snapshot_interval) or 1
        old_s = (
            train_s
            + (config.epochs + 1) * in_place_s
            + batteries * (embed_s + seconds["loop"])
            + models * embed_s
            + seconds["loop"]
        )
        how = "from its parts"
    new_s, today_s = sum(new_walls), sum(today_walls)
    share_old = (old_s - train_s) / old_s
    share_today = (today_s - train_s) / today_s
    share_new = (new_s - train_s) / new_s
    figures = {"train_s": train_s, "old_s": old_s, "today_s": today_s, "new_s": new_s}
    figures.update(share_old=share_old, share_today=share_today, share_new=share_new)
    figures.update(embed_s=embed_s, loop_s=seconds["loop"], batched_s=seconds["batched"])
    figures.update(embed_packed_s=seconds.get("embed_packed_s", math.nan))
    figures.update(in_place_s=in_place_s, in_place_packed_s=in_place_packed_s)
    figures.update(train_cpu_s=train_cpu, old_cpu_s=old_cpu, today_cpu_s=today_cpu)
    figures.update(new_cpu_s=new_cpu)
    waited = new_reports[-1][names.EVAL_SECONDS]
    print(
        f"the first path (battery in place, reference engine, the ensemble embedding again "
        f"in parts only, padded), {how}: {old_s:.1f} s, evaluation "
        f"{100 * share_old:.1f}% of the run; CPU {old_cpu:.1f} s\n"
        f"today's path (battery in the background, batched engine, the ensemble reusing its "
        f"snapshots' embeddings, padded): {today_s:.1f} s, evaluation "
        f"{100 * share_today:.1f}% of the run; CPU {today_cpu:.1f} s; the last epoch's "
        f"evaluation {today_reports[-1][names.EVAL_SECONDS]:.2f} s\n"
        f"new path (today's, with the packed CPU embeddings): {new_s:.1f} s, evaluation "
        f"{100 * share_new:.1f}% of the run; CPU {new_cpu:.1f} s; per epoch "
        + " ".join(f"{w:.2f}" for w in new_walls)
        + " s (training only: "
        + " ".join(f"{w:.2f}" for w in train_walls)
        + f" s); the last epoch's evaluation {waited:.2f} s (waits for its battery); "
        f"{_load_average()}",
        flush=True,
    )
    whole = args.whole_epochs or (32 if device.type == "cuda" else config.epochs)
    if whole != config.epochs and config.epochs >= 2:
        per_train = train_s / config.epochs
        first, last = new_walls[0], new_walls[-1] - per_train
        middle = [w - per_train for w in new_walls[1:-1]] or [last]
        overhead = first + (whole - 1) * (sum(middle) / len(middle)) + last
        new_whole = whole * per_train + overhead
        old_epoch = in_place_s + (embed_s + seconds["loop"]) / every
        old_overhead = (whole + 1) * old_epoch + 2 * embed_s + seconds["loop"]
        old_whole = whole * per_train + old_overhead
        figures.update(share_old_whole=old_overhead / old_whole)
        figures.update(share_new_whole=overhead / new_whole)
        print(
            f"extrapolated to {whole} epochs: the first path "
            f"{100 * old_overhead / old_whole:.1f}%, "
            f"new {100 * overhead / new_whole:.1f}% of the run "
            f"(goal <= {5 if device.type == 'cuda' else 10}%)",
            flush=True,
        )
    if old_reports:
        same_dev = all(
            a[k] == b[k]
            for a, b in zip(old_reports, today_reports, strict=True)
            for k in a
            if k.startswith(names.DEV)
        )
        print(f"the first and today's runs' dev metrics (what selects) identical: {same_dev}")
    same, largest, where = _largest_difference(new_reports, today_reports)
    figures.update(largest_difference=largest)
    print(
        f"today's and the new run report the same metrics at the same epochs: {same}; "
        f"identical: {_without_times(new_reports) == _without_times(today_reports)}; "
        f"largest difference {largest:.3g} ({where})"
    )
    final = new_reports[-1]
    print(
        f"(the new path's ensemble: test R@10 mean {final[names.FINISHED]:.1f}, semantic "
        f"{final.get(names.key(names.ENSEMBLE, 'semantic'), math.nan):.3f})"
    )
    return figures


@entry
def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--part", choices=("retrieval", "epoch", "both", "battery"), default="both",
                   help="(a) retrieval, (b) epoch, both of them, or (c) battery")  # fmt: skip
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--images", type=int, default=5000, help="(a) images (5 captions each)")
    p.add_argument("--dim", type=int, default=2048, help="(a) embedding size")
    p.add_argument("--repeats", type=int, default=3, help="(a), (b) best of this many")
    p.add_argument("--reference-repeats", type=int, default=1, help="(a) per-query runs")
    p.add_argument("--store", default=None, help="(b), (c) default: the embedded world")
    p.add_argument("--hidden-size", type=int, default=None,
                   help="n; default (b) 1024 GPU, 256 CPU; (c) 1024 GPU, 32 CPU")  # fmt: skip
    p.add_argument("--steps", type=int, default=None, help="(b) default: 100 GPU, 4 CPU")
    p.add_argument(
        "--semantic-every",
        type=int,
        default=None,
        help="epochs between test batteries; (b) default 4, (c) default 1 GPU, 4 CPU",
    )
    p.add_argument(
        "--engine", choices=PROTOCOLS, default="batched", help="(b) the regressions' engine"
    )
    p.add_argument("--epochs", type=int, default=None, help="(c) default 3 GPU, 4 CPU")
    p.add_argument("--batch-size", type=int, default=None, help="(c) default 32 GPU, 64 CPU")
    p.add_argument(
        "--world-images", type=int, default=None, help="(c) default 10,000 GPU, 2,000 CPU"
    )
    p.add_argument(
        "--train-images", type=int, default=None, help="(b) default 6,000; (c) 6,000 GPU, all CPU"
    )
    p.add_argument(
        "--dev-images", type=int, default=None, help="(b) default 1,000; (c) 1,000 GPU, all CPU"
    )
    p.add_argument(
        "--baseline",
        choices=("run", "parts"),
        default=None,
        help="(c) the first path measured as a run, or from its parts (default: parts on a "
        "GPU, run on a CPU)",
    )
    p.add_argument(
        "--whole-epochs",
        type=int,
        default=None,
        help="(c) extrapolate to this many epochs (default 32 GPU, --epochs CPU)",
    )
    args = p.parse_args(argv)
    device = _common.device(args.device)
    if args.part == "battery":
        offpath(args, device)
        return 0
    args.steps = args.steps or (100 if device.type == "cuda" else 4)
    args.hidden_size = args.hidden_size or (1024 if device.type == "cuda" else 256)
    args.semantic_every = args.semantic_every or 4
    if args.part in ("retrieval", "both"):
        retrieval(args, device)
    if args.part in ("epoch", "both"):
        epoch_share(args, device)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
