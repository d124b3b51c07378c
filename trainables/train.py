"""``python -m trainables.train``: one training run, without Ray.

    python -m trainables.train --data stores/world --hidden-size 64 --epochs 4
    python -m trainables.train --data stores/flickr8k --senteval SentEval/data/downstream --json

Every field of :class:`trainables.config.TrainConfig` is an option (``--hidden-size``,
``--rnn-type``, ``--margin``, ...). It prints a line per epoch (epoch 0 is the untrained
model), or with ``--json`` one JSON object per epoch with all its metrics; the last
epoch's also holds the snapshot ensemble's test metrics. ``--checkpoint FILE`` saves
the full training state after every epoch (atomically: the file always holds a whole
epoch) and resumes from it when it exists: a checkpoint that finished ``--epochs`` has
nothing to train (one line says so, exit 0); one past ``--epochs`` is an error; one
stopped early and resumed with ``--epochs`` at its epoch ends there, with its ensemble.

Exit status: 0 when the run finished (or its checkpoint already had), 2 for bad input
(one ``error:`` line on stderr: an option, the store, the checkpoint), 130 after Ctrl+C
(one line saying what was saved and how to resume), 141 when stdout was closed.

The options and the lines printed are ``trainables._train_cli``; here: the run, its
checkpoint file, and how it ends.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import shlex
import signal
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import torch

from storage import StoreError, write_bytes_atomic
from trainables import checkpoint, names, prebuild_cpp_loop
from trainables._train_cli import COMMAND, build_parser, epoch_line, json_line, paper_sizes_on_cpu
from trainables.config import ConfigError, TrainConfig
from trainables.data import TrainingData, default_senteval
from trainables.loop import NonFiniteLossError, Trainer
from trainables.semantic import make_semantic

__all__ = [
    "main",
]


logger = logging.getLogger(__name__)
INTERRUPTED = 130  # the shell's status for a process stopped by SIGINT
OUTPUT_CLOSED = 141  # ... and by SIGPIPE


class _BadInput(Exception):
    """An option that cannot be used (a checkpoint path, --epochs against a checkpoint)."""


@dataclass
class _Progress:
    """What a stop reports: the run's config, the last epoch reported or resumed from,
    and the epoch the checkpoint file holds (None: no file written or resumed)."""

    checkpoint: Path | None
    config: TrainConfig | None = None
    epoch: int | None = None
    saved_epoch: int | None = None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    progress = _Progress(args.checkpoint)
    try:
        return _train(args, progress)
    except KeyboardInterrupt:
        with contextlib.suppress(ValueError):  # a second Ctrl+C must not cut the message
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(_interrupted(progress, argv), file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # the reader of stdout went away (`... | head`)
        _close_stdout()
        print(_interrupted(progress, argv, "stopped (its output was closed)"), file=sys.stderr)
        return OUTPUT_CLOSED
    except ConfigError as err:  # named by its option, not its field
        return _fail(f"--{err.field.replace('_', '-')}: {err.detail}" if err.field else err)
    except (StoreError, ValueError, NonFiniteLossError, _BadInput) as err:
        return _fail(err)
    except RuntimeError as err:
        if not (isinstance(err, torch.OutOfMemoryError) or "allocate memory" in str(err)):
            raise
        return _fail(_out_of_memory(err, progress.config))


def _fail(err: object) -> int:
    text = " ".join(str(err).split("\n"))
    print(f"error: {text}", file=sys.stderr)
    return 2


def _out_of_memory(err: RuntimeError, config: TrainConfig | None) -> str:
    sizes = ""
    if config is not None and config.encoder == "char_rnn":
        sizes = (
            f" with hidden_size {config.hidden_size}, char_embedding_dim "
            f"{config.char_embedding_dim}, attention_hidden {config.attention_hidden}, "
            f"batch_size {config.batch_size} on device {config.device}"
        )
    elif config is not None:
        rnn = "" if config.encoder == "word_bow" else f"hidden_size {config.hidden_size}, "
        sizes = (
            f" with encoder {config.encoder}, {rnn}word_embedding_dim "
            f"{config.word_embedding_dim}, batch_size {config.batch_size} on device "
            f"{config.device}"
        )
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return f"out of memory{sizes} ({first[:300]}); choose smaller sizes"


def _train(args: argparse.Namespace, progress: _Progress) -> int:
    overrides = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(TrainConfig)
        if getattr(args, f.name) is not None
    }
    config = progress.config = TrainConfig.from_dict(overrides)
    state = None if args.checkpoint is None else _resume_state(args.checkpoint, config)
    if state is not None:
        progress.epoch = progress.saved_epoch = int(state["epoch"])
        if _finished(args.checkpoint, state, config):
            return 0
    data = TrainingData.from_store(args.data, verify=not args.no_verify)
    senteval = args.senteval or default_senteval(args.data)
    trains_on_cpu = config.run.device == "cpu" or not torch.cuda.is_available()
    if trains_on_cpu and config.recurrence == "compiled":
        prebuild_cpp_loop(logger.info)  # the C++ recurrence, once per key (a line says so)
    trainer = Trainer(config, data, make_semantic(senteval, config.evaluation, config.run))
    if state is not None:
        trainer.load_state_dict(state)
        logger.info("resumed from %s at epoch %d", args.checkpoint, trainer.epoch)
    del state  # the trainer holds its own copy
    if (note := paper_sizes_on_cpu(overrides, trainer.device)) is not None:
        print(note, file=sys.stderr)
    logger.info(
        "training on %s: %d train images, device %s, %s",
        args.data,
        data.train.num_images,
        trainer.device,
        torch.__version__,
    )
    for metrics in trainer.run():
        with _sigint_deferred():  # Ctrl+C waits: an epoch printed is an epoch saved
            progress.epoch = int(metrics["epoch"])
            print(json_line(metrics) if args.json else epoch_line(metrics), flush=True)
            if args.checkpoint is not None:
                _save(trainer, args.checkpoint, progress)
    return 0


def _resume_state(path: Path, config: TrainConfig) -> dict[str, Any] | None:
    """The training state in ``path`` (None when there is none yet), checked before any
    data is read: a file that is not a checkpoint, of another config, or a path that
    cannot be written is ``_BadInput`` or a ``CheckpointError`` naming it."""
    what = f"--checkpoint {path}"
    if path.is_dir():
        raise _BadInput(f"{what}: is a directory; expected a file (the training state)")
    if path.exists() and not path.is_file():
        raise _BadInput(f"{what}: is not a regular file; expected a checkpoint file")
    folder = path.parent
    if not folder.is_dir():
        problem = "is not a directory" if folder.exists() else "does not exist"
        raise _BadInput(f"{what}: its folder {folder} {problem}; create it or choose another")
    _check_writable(folder, what)
    if not path.exists():
        return None
    state = checkpoint.load_training_state(path, "cpu", what=what)
    checkpoint.check_resumable(state["config"], config, what=what)
    return state


def _check_writable(folder: Path, what: str) -> None:
    """Create and remove a file in ``folder`` (as the atomic write will), so a folder that
    cannot be written fails now rather than after the first epoch."""
    probe = folder / f".probe.{uuid.uuid4().hex}.tmp"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        probe.unlink()
    except OSError as err:
        raise _BadInput(f"{what}: cannot write in {folder} ({err.strerror or err})") from None


def _finished(path: Path, state: dict[str, Any], config: TrainConfig) -> bool:
    """True (with a line saying so) when the checkpoint has already trained
    ``config.epochs`` epochs; ``_BadInput`` when it is past them."""
    epoch = int(state["epoch"])
    if epoch > config.epochs:
        raise _BadInput(
            f"--epochs {config.epochs}: the checkpoint {path} is already at epoch {epoch}; "
            f"pass --epochs {epoch} to end it there, more to train it further, or another "
            "--checkpoint to start a new run"
        )
    history = state["history"]
    if epoch < config.epochs or not history or not names.is_finished(history[-1]):
        return False  # to train, or (stopped at --epochs) to evaluate the ensemble of
    where = f"trainables.checkpoint.load_training_state({str(path)!r})['history']"
    print(
        f"nothing to train: the checkpoint {path} has finished its {epoch} epochs "
        f"(--epochs {config.epochs}); every epoch's metrics and the ensemble's test metrics "
        f"are in its history ({where}); pass --epochs above {epoch} to train it further",
        file=sys.stderr,
    )
    return True


def _save(trainer: Trainer, path: Path, progress: _Progress) -> None:
    """Write the training state atomically (the file holds the previous epoch or this
    one, never part of one) and record which epoch it holds."""
    try:
        write_bytes_atomic(path, trainer.save_checkpoint())
    except OSError as err:
        kept = (
            f"it still holds epoch {progress.saved_epoch}"
            if progress.saved_epoch is not None
            else "nothing was saved"
        )
        raise _BadInput(
            f"--checkpoint {path}: cannot be written ({err.strerror or err}); {kept}"
        ) from None
    progress.saved_epoch = trainer.epoch


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold a Ctrl+C that arrives in the block until its end, then raise it."""
    received: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    try:
        previous = signal.signal(signal.SIGINT, hold)
    except ValueError:  # not the main thread: there is no Ctrl+C to hold here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
        if received:
            raise KeyboardInterrupt


def _close_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit fails no more."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _interrupted(progress: _Progress, argv: list[str], how: str = "interrupted") -> str:
    """The one line after Ctrl+C: what was saved, and the command that goes on."""
    command = shlex.join([*COMMAND.split(), *argv])
    of = f" of {progress.config.epochs}" if progress.config is not None else ""
    at = f"after epoch {progress.epoch}{of}" if progress.epoch is not None else "before epoch 0"
    if progress.checkpoint is None:
        return (
            f"{how} {at}: nothing was saved (no --checkpoint); to keep every epoch's "
            f"progress and resume after a stop, run: {command} --checkpoint FILE"
        )
    if progress.saved_epoch is None:
        return (
            f"{how} {at}: no checkpoint was written yet ({progress.checkpoint}); "
            f"start again with: {command}"
        )
    return (
        f"{how} {at}: the last complete checkpoint is {progress.checkpoint} (epoch "
        f"{progress.saved_epoch}); resume with: {command}"
    )


if __name__ == "__main__":
    sys.exit(main())
