"""``python -m trainables.train``: one training run, without Ray.

    python -m trainables.train --data stores/world --hidden-size 64 --epochs 4
    python -m trainables.train --data stores/flickr8k --senteval SentEval/data/downstream --json

Every field of :class:`trainables.config.TrainConfig` is an option (``--hidden-size``,
``--rnn-type``, ``--margin``, ...). It prints a line per epoch (epoch 0 is the untrained
model), or with ``--json`` one JSON object per epoch with all its metrics; the last
epoch's also holds the snapshot ensemble's test metrics. ``--checkpoint FILE`` saves
the full training state after every epoch and resumes from it when it exists.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path

import torch

from storage import StoreError
from storage._atomic import write_bytes_atomic
from trainables import names
from trainables.config import TrainConfig
from trainables.data import TrainingData, default_senteval
from trainables.loop import NonFiniteLossError, Trainer
from trainables.semantic import make_semantic

__all__ = [
    "main",
]


logger = logging.getLogger(__name__)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trainables.train",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--data", required=True, help="feature store (path or URI)")
    parser.add_argument(
        "--senteval",
        default=None,
        help="SentEval data/downstream directory (default: the store's own "
        "semantic sets, if it has any)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object per epoch")
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="skip checking every shard's sha256 against the manifest while reading (saves "
        "about a third of the store read; a corrupt shard then trains silently)",
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="save the training state here after every epoch; resume from it",
    )
    group = parser.add_argument_group("training config (TrainConfig)")
    for field in dataclasses.fields(TrainConfig):
        group.add_argument(
            f"--{field.name.replace('_', '-')}",
            dest=field.name,
            default=None,
            metavar=field.type.upper() if isinstance(field.type, str) else "X",
            help=f"default: {field.default}",
        )
    return parser


def _line(metrics: dict[str, float]) -> str:
    parts = [f"epoch {int(metrics['epoch']):>3}"]
    if names.LOSS in metrics:
        parts.append(f"loss {metrics[names.LOSS]:8.3f}")
    parts += _scores(metrics, names.DEV)
    if names.TRAIN_SECONDS in metrics:
        parts.append(
            f"({metrics[names.TRAIN_SECONDS]:.1f} s train, "
            f"{metrics[names.EVAL_SECONDS]:.1f} s eval)"
        )
    line = "  ".join(parts)
    if names.is_finished(metrics):
        size = int(metrics[names.ENSEMBLE_SIZE])
        epochs = [
            str(int(metrics[names.ensemble_epoch(k + 1)]))
            for k in range(size)
            if names.ensemble_epoch(k + 1) in metrics
        ]
        test = "  ".join(_scores(metrics, names.ENSEMBLE))
        line += f"\ntest, ensemble of epochs {', '.join(epochs) or '(final model)'}:  {test}"
    return line


def _scores(metrics: dict[str, float], split: str) -> list[str]:
    parts = []
    for label, name in (
        ("R@10 c2i", "c2i_r10"),
        ("i2c", "i2c_r10"),
        ("mean", "r10_mean"),
        ("semantic", "semantic"),
    ):
        value = metrics.get(names.key(split, name))
        if value is not None:
            parts.append(f"{label} {value:6.3f}" if name == "semantic" else f"{label} {value:5.1f}")
    return parts


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    overrides = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(TrainConfig)
        if getattr(args, f.name) is not None
    }
    try:
        config = TrainConfig.from_dict(overrides)
        data = TrainingData.from_store(args.data, verify=not args.no_verify)
        senteval = args.senteval or default_senteval(args.data)
        trainer = Trainer(config, data, make_semantic(senteval, config))
        if args.checkpoint is not None and args.checkpoint.exists():
            trainer.load_checkpoint(args.checkpoint)
            logger.info("resumed from %s at epoch %d", args.checkpoint, trainer.epoch)
        logger.info(
            "training on %s: %d train images, device %s, %s",
            args.data,
            data.train.num_images,
            trainer.device,
            torch.__version__,
        )
        for metrics in trainer.run():
            print(json.dumps(metrics) if args.json else _line(metrics), flush=True)
            if args.checkpoint is not None:
                write_bytes_atomic(args.checkpoint, trainer.save_checkpoint())
    except (StoreError, ValueError, NonFiniteLossError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
