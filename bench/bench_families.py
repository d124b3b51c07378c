"""Each encoder family (and variant) at its preset, CPU-sized, on the embedded world.

    python bench/bench_families.py --epochs 8 --threads 2 --out bench/results/families.json
    python bench/bench_families.py --families char_rnn,word_bow --epochs 1   # quick

For every name of ``trainables.presets.PRESETS``, with the CPU-sized settings of a
search (``gridsearch.settings.CPU_SIZED``: n = 32, batch 64, 1-epoch cycles) where the
family has the field, trains on the embedded world (2,000 images, built once into
``--store``) and prints: the snapshot ensemble's test R@10 mean and test semantic score,
training captions/s (the median over the trained epochs), and what held-out forms do:
test R@10 mean when every test caption carries one character-level typo (the world's
own ``add_typo``) and when every shape, colour, size and relation word is replaced by a
synonym no training caption uses (``with_held_out_synonyms``), and for word families the
share of test words the vocabulary does not know (clean / typos / synonyms). Captions/s
are comparable only on a quiet machine: the load average at the start and the end is
printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if not __package__:  # run as a file: the repository first on sys.path (see bench/__init__.py)
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench import _common
from bench._cli import BadInput, entry, parser
from gridsearch.settings import CPU_SIZED
from storage import write_text_atomic
from storage.synthetic import add_typo, with_held_out_synonyms
from trainables import names
from trainables.checkpoint import EnsembleWeights
from trainables.config import ConfigError, TrainConfig, applicable
from trainables.data import TrainingData, default_senteval
from trainables.encoder import SentenceEncoder
from trainables.loop import Trainer
from trainables.metrics import retrieval_metrics
from trainables.presets import PRESETS
from trainables.semantic import make_semantic
from trainables.vocabulary import UNKNOWN_INDEX, WordVocabulary

WORLD_IMAGES = 2000  # the default search's embedded world


def _config(name: str, args: argparse.Namespace) -> TrainConfig:
    values = dict(PRESETS[name])
    sized = applicable(CPU_SIZED, values.get("encoder", TrainConfig.encoder))
    run = {"epochs": args.epochs, "threads": args.threads, "seed": args.seed, "device": "cpu",
           "lr_max": args.lr_max, "semantic_every": args.epochs}  # fmt: skip
    return TrainConfig.from_dict({**values, **sized, **run})


def _unknown_share(encoder: SentenceEncoder, captions: list[str]) -> float | None:
    if not isinstance(encoder.encoding, WordVocabulary):
        return None
    tokens, lengths = encoder.encoding.encode(captions)
    return float((tokens == UNKNOWN_INDEX).sum() / lengths.sum())


def _one(
    name: str,
    config: TrainConfig,
    data: TrainingData,
    senteval: str | None,
    args: argparse.Namespace,
) -> dict[str, Any]:
    started = time.perf_counter()
    trainer = Trainer(config, data, make_semantic(senteval, config.evaluation, config.run))
    history = list(trainer.run())
    last = history[-1]
    encoder = SentenceEncoder(
        EnsembleWeights.from_training_state(trainer.state_dict()), device="cpu"
    )
    clean = list(data.test.captions)
    rng = random.Random(args.seed)
    typos = [add_typo(caption, rng) for caption in clean]
    synonyms = [with_held_out_synonyms(caption, rng) for caption in clean]
    images = encoder.encode_images(data.test.features, normalize=False)

    def r10(captions: list[str]) -> float:
        joint = encoder.encode(captions, normalize=False, space="joint")
        return float(retrieval_metrics(images, joint)["r10_mean"])

    clean_r10 = last[names.key(names.ENSEMBLE, "r10_mean")]
    return {
        "family": name,
        "config": applicable(
            {k: v for k, v in config.to_dict().items() if k in PRESETS[name] or k in CPU_SIZED},
            config.encoder,
        ),
        "test_r10_mean": clean_r10,
        "test_semantic": last.get(names.key(names.ENSEMBLE, "semantic"), float("nan")),
        "dev_r10_mean_best": last[names.BEST_RETRIEVAL],
        "dev_semantic_best": last.get(names.BEST_SEMANTIC, float("nan")),
        "captions_per_s": statistics.median(h[names.CAPTIONS_PER_S] for h in history[1:]),
        "test_r10_mean_typos": r10(typos),
        "test_r10_mean_synonyms": r10(synonyms),
        "unknown_words": _unknown_share(encoder, clean),
        "unknown_words_typos": _unknown_share(encoder, typos),
        "unknown_words_synonyms": _unknown_share(encoder, synonyms),
        "seconds": time.perf_counter() - started,
    }


def _row(r: dict[str, Any]) -> str:
    unknown = (
        "-"
        if r["unknown_words"] is None
        else "/".join(
            f"{100 * r[k]:.1f}%"
            for k in ("unknown_words", "unknown_words_typos", "unknown_words_synonyms")
        )
    )
    return (f"{r['family']:<16} {r['test_r10_mean']:6.1f} {r['test_semantic']:7.3f} "
            f"{r['captions_per_s']:8.0f} {r['test_r10_mean_typos']:6.1f} "
            f"{r['test_r10_mean_synonyms']:6.1f}  {unknown}")  # fmt: skip


@entry
def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--families", default=",".join(PRESETS), help="PRESETS names, comma-separated")
    p.add_argument("--epochs", type=int, default=4, help="per family")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=0, help="training and typo seed")
    p.add_argument("--lr-max", type=float, default=CPU_SIZED["lr_max"], help="the CPU-sized rate")
    p.add_argument("--store", type=Path, default=Path("runs/world"),
                   help=f"the embedded world (built there, {WORLD_IMAGES:,} images, "
                   "if absent)")  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("bench/results/families.json"),
                   help="the results as JSON")  # fmt: skip
    args = p.parse_args(argv)
    families = args.families.split(",")
    unknown = [f for f in families if f not in PRESETS]
    if unknown:
        raise BadInput(f"error: --families: unknown {', '.join(unknown)}; "
                       f"expected {', '.join(PRESETS)}")  # fmt: skip
    try:
        configs = {name: _config(name, args) for name in families}
    except ConfigError as e:
        raise BadInput(f"error: the training config: {e}") from None
    if not (args.store / "manifest.json").exists():
        _common.build_world(args.store, WORLD_IMAGES)
    data = _common.load(str(args.store), None)
    senteval = default_senteval(str(args.store))
    load = os.getloadavg()[0]
    command = [sys.argv[0], *(sys.argv[1:] if argv is None else argv)]
    print(f"$ {' '.join(command)}\nload average at start {load:.2f}")
    print(f"{'family':<16} {'R@10':>6} {'sem':>7} {'capt/s':>8} {'typos':>6} {'synon.':>6}"
          "  unknown words (clean/typos/synonyms)")  # fmt: skip
    results = []
    for name in families:
        results.append(_one(name, configs[name], data, senteval, args))
        print(_row(results[-1]), flush=True)
    print(f"load average at end {os.getloadavg()[0]:.2f}")
    record = {
        "argv": command,
        "load_start": load,
        "load_end": os.getloadavg()[0],
        "results": results,
    }
    write_text_atomic(args.out, json.dumps(record, indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
