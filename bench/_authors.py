"""The authors' own training loop (their released ``caption2image``), as the benchmarks
run it beside ours: their code found in a work tree or a git directory, our batches in
their format, their trainer built as their Flickr8k character script builds it. Nothing of
their code is in this repository."""

from __future__ import annotations

import contextlib
import io
import math
import string
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench._cli import BadInput
from trainables.data import EncodedSplit

__all__ = ["ATTENTION_HIDDEN", "EMBED", "FEATURES", "AuthorsLoop", "authors_batches",
           "authors_functions"]  # fmt: skip

EMBED = 20  # the character embedding (docs/protocols.md section 1), both loops
ATTENTION_HIDDEN = 128
FEATURES = 2048


def authors_functions(repo: Path, scratch: Path) -> Path:
    """The folder of the authors' ``PyTorch/functions``: in a work tree, or extracted
    from a git directory."""
    inside = repo / "PyTorch" / "functions"
    if inside.is_dir():
        return inside
    if not (repo / "HEAD").is_file():
        raise BadInput(f"error: --authors-repo {repo}: neither a work tree with "
                         "PyTorch/functions nor a git directory")  # fmt: skip
    archive = subprocess.run(
        ["git", f"--git-dir={repo}", "archive", "HEAD", "PyTorch/functions"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(scratch)], input=archive, check=True)
    return scratch / "PyTorch" / "functions"


def _authors_index(text: str) -> list[int]:
    """Their character indices, as their ``find_index``: ``string.printable``'s position
    + 1 (0 pads), -1 for a character outside it."""
    return [i + 1 if (i := string.printable.find(c)) != -1 else -1 for c in text]


def authors_batches(split: EncodedSplit, plan: np.ndarray) -> list[tuple[Any, Any, list[int]]]:
    """Our batches in the format their batcher yields: (float64 features, character
    indices padded to the batch's longest caption, lengths)."""
    batches = []
    for rows in plan:
        texts = [str(split.captions[r]) for r in rows]
        lengths = [len(t) for t in texts]
        chars = np.zeros((len(texts), max(lengths)))
        for i, text in enumerate(texts):
            chars[i, : len(text)] = _authors_index(text)
        features = np.float64(split.features[rows // 5])
        batches.append((features, chars, lengths))
    return batches


class AuthorsLoop:
    """Their trainer, built as their Flickr8k character script builds it, at size n, on
    the CPU or (their ``set_cuda``) the current CUDA device."""

    def __init__(
        self, functions: Path, n: int, batch: int, steps_per_cycle: int, seed: int,
        cuda: bool = False,
    ):  # fmt: skip
        sys.path.insert(0, str(functions))
        from costum_loss import batch_hinge_loss
        from encoders import img_encoder, text_rnn_encoder
        from torch.optim import lr_scheduler
        from trainer import flickr_trainer

        torch.manual_seed(seed)
        chars = {"num_chars": 100, "embedding_dim": EMBED, "sparse": False, "padding_idx": 0}
        rnn = {"input_size": EMBED, "hidden_size": n, "num_layers": 1, "batch_first": True,
               "bidirectional": True, "dropout": 0}  # fmt: skip
        att = {"in_size": 2 * n, "hidden_size": ATTENTION_HIDDEN, "heads": 1}
        image = img_encoder({"linear": {"in_size": FEATURES, "out_size": 2 * n}, "norm": True})
        caption = text_rnn_encoder({"embed": chars, "rnn": rnn, "att": att})
        params = list(image.parameters()) + list(caption.parameters())
        optimizer = torch.optim.Adam(params, 1)

        def cyclic(it: int, lo: float = 1e-6, hi: float = 1e-3) -> float:
            return (hi - lo) * (0.5 * (math.cos(math.pi * (1 + 2 / steps_per_cycle * it)) + 1)) + lo

        self.trainer = flickr_trainer(image, caption, "resnet", "raw_text")
        self.trainer.set_loss(batch_hinge_loss)
        self.trainer.set_optimizer(optimizer)
        self.trainer.set_lr_scheduler(lr_scheduler.LambdaLR(optimizer, cyclic), "cyclic")
        self.trainer.set_gradient_clipping(0.0025, 0.05)
        if cuda:
            self.trainer.set_cuda()
        self.batch = batch

    def train(self, batches: list[tuple[Any, Any, list[int]]]) -> None:
        self.trainer.batcher = lambda data, batch_size, shuffle: iter(batches)
        with contextlib.redirect_stdout(io.StringIO()):  # their per-epoch prints
            self.trainer.train_epoch(None, self.batch)
