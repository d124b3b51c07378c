"""The command line of ``python -m trainables.train`` (``trainables.train`` runs it):
its options, one per ``TrainConfig`` field with a help text that shows its default, and
the lines it prints (an epoch's line, or its strict JSON object)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from storage.cli import HelpFormatter, OneLineParser
from trainables import names
from trainables.config import (
    CHOICES,
    CPU_SIZED,
    EvalConfig,
    LossConfig,
    ModelConfig,
    OptimConfig,
    RunConfig,
    TrainConfig,
)

if TYPE_CHECKING:
    import torch

__all__ = ["COMMAND", "build_parser", "epoch_line", "json_line", "paper_sizes_on_cpu"]

COMMAND = "python -m trainables.train"
_METAVARS = {"device": "DEVICE", "word_vectors": "PATH"}
# the training config's options, one group per concern (TrainConfig is all of them)
_CONCERNS: tuple[tuple[str, type[Any]], ...] = (
    ("model", ModelConfig),
    ("loss", LossConfig),
    ("optimisation", OptimConfig),
    ("evaluation", EvalConfig),
    ("run", RunConfig),
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=COMMAND,
        formatter_class=HelpFormatter,
        description="Train one model without Ray, printing every epoch's metrics. The "
        "training config's defaults are the paper's Flickr8k sizes (n = 1024, 32 epochs) on "
        f"every device, a CPU too, where they take hours; a CPU-sized run: {_cpu_sized()}.",
        epilog="Exit status: 0 finished (or the checkpoint already was), 2 bad input (one "
        "'error:' line), 130 interrupted (Ctrl+C; the line says how to resume).",
    )
    parser.add_argument("--data", required=True, help="feature store (path or URI); required")
    parser.add_argument(
        "--senteval",
        type=_non_empty,
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
        type=_file_path,
        default=None,
        metavar="FILE",
        help="save the training state to FILE after every epoch, and resume from it when it "
        "exists (its folder must exist; same config, only --epochs, --device, --threads, "
        "--eval-batch-size, --engine and --recurrence may change) (default: none, nothing "
        "saved)",
    )
    for title, part in _CONCERNS:
        group = parser.add_argument_group(f"{title} ({part.__name__}; defaults: the paper's)")
        for field in dataclasses.fields(part):
            allowed = CHOICES.get(field.name)
            kind = str(field.type).upper()
            metavar = "|".join(allowed) if allowed else _METAVARS.get(field.name, kind)
            default = field.default if field.default != "" else repr("")
            group.add_argument(
                f"--{field.name.replace('_', '-')}",
                dest=field.name,
                default=None,
                metavar=metavar,
                help=f"{field.metadata['help']} (default: {default})",
            )
    return parser


def _cpu_sized() -> str:
    """The options of the search's CPU-sized run (``trainables.config.CPU_SIZED``)."""
    return " ".join(f"--{k.replace('_', '-')} {v}" for k, v in CPU_SIZED.items())


def paper_sizes_on_cpu(overrides: dict[str, Any], device: torch.device) -> str | None:
    """The line said when a CPU run trains the paper's sizes (none of CPU_SIZED's size
    options given), else None."""
    if device.type != "cpu" or any(k in overrides for k in ("hidden_size", "epochs")):
        return None
    return (
        f"note: the paper's sizes (--hidden-size {TrainConfig.hidden_size}, --epochs "
        f"{TrainConfig.epochs}) on the CPU take hours; a CPU-sized run: {_cpu_sized()}"
    )


def _file_path(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a file path, got {text!r}")
    return Path(text)


def _non_empty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a path, got {text!r}")
    return text


def epoch_line(metrics: dict[str, float]) -> str:
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


def json_line(metrics: dict[str, float]) -> str:
    """Strict JSON: an undefined value (a NaN correlation, say) is ``null``, never the
    bare ``NaN`` that other JSON readers refuse."""
    return json.dumps({k: v if math.isfinite(v) else None for k, v in metrics.items()})
