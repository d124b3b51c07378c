"""Use what a search found: a trained model (or snapshot ensemble) that embeds sentences.

    from trainables.encoder import SentenceEncoder

    encoder = SentenceEncoder.load("models:/margin_sweep@best-retrieval")
    vectors = encoder.encode(["A small red circle.", "A big blue square."])  # (2, 2n)
    encoder.similarity(["A red circle."], ["A small red circle.", "A dog."])  # (1, 2)

``SentenceEncoder.load(model)`` takes any of:

- an ensemble file (``ensemble.pt``, a trial's MLflow artifact) or a training checkpoint
  (``trainables.train --checkpoint``, a Tune checkpoint's ``trainer.pt``, or the Tune
  checkpoint directory holding it): its reported ensemble;
- an MLflow run id, a Tune trial id or a trial's run name (``trial-8c1f0a2e``), looked up
  in the tracking store (``tracking_uri``, default the search's ``runs/mlflow.db``);
- a registered model URI, ``models:/NAME@ALIAS`` or ``models:/NAME/VERSION``, or a
  ``runs:/RUN_ID/PATH`` URI.

The last two are looked up by the function registered under the ``MODEL_SOURCES``
entry-point group (``analysis.models.fetch_ensemble``, see pyproject.toml), loaded only
then: this module imports neither Ray nor MLflow, nor anything above it. A stopped-early
or failed trial's file holds its last evaluated model (``encoder.complete`` is False).
Embeddings are the sum over the ensemble's snapshots, as the training code computes them,
then L2-normalised unless ``normalize=False``; float32 numpy arrays, batched by length,
the same on every call.

Every encoder family (``TrainConfig.encoder``) works the same way: raw text is encoded
with the model's own input, kept in its file (``encoder.encoding``): the characters of a
character model, or the vocabulary and tokenisation of a word model
(``trainables.vocabulary``: words it never saw in training are its unknown word).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import torch

from trainables import _packed_rnn_cpp
from trainables.checkpoint import (
    ENSEMBLE_FILE,
    TRAINER_FILE,
    CheckpointError,
    EnsembleWeights,
    from_bytes,
    load_ensemble,
)
from trainables.device import resolve_device
from trainables.embedding import embed_images, embed_sentences
from trainables.vocabulary import Tokenizer

__all__ = ["MAX_CHARS", "MODEL_SOURCES", "Progress", "SentenceEncoder"]

# a longer line is not a sentence (the RNN steps once per character): what the encode
# command and the served model refuse
MAX_CHARS = 10_000

# The entry-point group of the functions ``(reference, tracking_uri) -> EnsembleWeights``
# that look run ids and model URIs up (pyproject.toml registers analysis.models').
MODEL_SOURCES = "grounded_gridsearch.model_sources"

Progress = Callable[[int, int], None]  # (sentences done, in all)


class SentenceEncoder:
    """A trained caption encoder and its image encoder (see the module docstring)."""

    def __init__(
        self, weights: EnsembleWeights, *, device: str = "auto", batch_size: int = 0
    ) -> None:
        self.weights = weights
        self.device = resolve_device(device)
        self.batch_size = batch_size  # sentences at once; 0 = by device
        self.models = weights.models(self.device)
        _packed_rnn_cpp.use(weights.config.recurrence)  # as the run it comes from
        # the models' own input: the alphabet, or a word model's vocabulary and tokenisation
        self.encoding: Tokenizer = self.models[0].caption_encoder.tokenizer

    @classmethod
    def load(
        cls,
        model: str | os.PathLike[str],
        *,
        tracking_uri: str | None = None,
        device: str = "auto",
        batch_size: int = 0,
    ) -> SentenceEncoder:
        """The encoder ``model`` names (see the module docstring); ``CheckpointError``
        (a ``ValueError``) naming it when it is not one."""
        return cls(_weights(model, tracking_uri), device=device, batch_size=batch_size)

    @property
    def config(self) -> object:
        return self.weights.config

    @property
    def complete(self) -> bool:
        """False for a stopped-early or failed trial's last evaluated model."""
        return self.weights.complete

    @property
    def embedding_dim(self) -> int:
        return self.weights.config.embedding_dim

    def encode(
        self,
        sentences: Sequence[str],
        *,
        batch_size: int | None = None,
        normalize: bool = True,
        progress: Progress | None = None,
        space: str = "sentence",
    ) -> np.ndarray:
        """``(len(sentences), 2n)`` float32 embeddings, in the sentences' order: the
        sentence embeddings, or with ``space="joint"`` the ones to compare with
        ``encode_images`` (the same vectors for every family but cap2img, whose captions
        are projected into the image-feature space)."""
        if isinstance(sentences, str):
            raise TypeError("sentences: expected a sequence of strings, got one string")
        size = self.batch_size if batch_size is None else batch_size
        chunk = max(size, 1) * 64 if size else 16_384  # sentences between progress calls
        parts = []
        for start in range(0, len(sentences), chunk):
            part = list(sentences[start : start + chunk])
            parts.append(
                embed_sentences(
                    self.models,
                    part,
                    batch_size=size,
                    precision=self.weights.config.precision,
                    encoding=self.encoding,
                    space=space,
                )
            )
            if progress is not None:
                progress(min(start + chunk, len(sentences)), len(sentences))
        if not parts:
            dim = self.models[0].joint_dim if space == "joint" else self.embedding_dim
            return np.zeros((0, dim), dtype=np.float32)
        return _finish(torch.cat(parts), normalize)

    def encode_images(self, features: np.ndarray, *, normalize: bool = True) -> np.ndarray:
        """``(N, 2n)`` float32 embeddings of CNN features ``(N, D)``."""
        array = torch.as_tensor(np.asarray(features, dtype=np.float32))
        if array.ndim != 2 or array.shape[1] != self.weights.feature_dim:
            raise ValueError(
                f"features: expected shape (N, {self.weights.feature_dim}), got "
                f"{tuple(array.shape)}"
            )
        return _finish(embed_images(self.models, array), normalize)

    def similarity(
        self, a: Sequence[str] | np.ndarray, b: Sequence[str] | np.ndarray
    ) -> np.ndarray:
        """Cosine similarities ``(len(a), len(b))`` of sentences or embeddings."""
        left, right = (self._vectors(x) for x in (a, b))
        return (left @ right.T).astype(np.float32)

    def _vectors(self, x: Sequence[str] | np.ndarray) -> np.ndarray:
        if isinstance(x, np.ndarray):
            norms = np.linalg.norm(x, axis=1, keepdims=True)
            return x / np.maximum(norms, 1e-12)
        return self.encode(x)


def _finish(vectors: torch.Tensor, normalize: bool) -> np.ndarray:
    if normalize:
        vectors = torch.nn.functional.normalize(vectors, dim=1)
    return vectors.cpu().numpy().astype(np.float32, copy=False)


def _weights(model: str | os.PathLike[str], tracking_uri: str | None) -> EnsembleWeights:
    text = os.fspath(model)
    if not text.strip():  # Path("") is the working directory: never what was meant
        raise CheckpointError(
            f"model {text!r}: empty; expected a checkpoint or ensemble file, a folder of "
            "one, a run id, trial id or run name, or a models:/ or runs:/ URI"
        )
    path = Path(text)
    if path.is_dir():
        inside = _models_in(path)
        if not inside:
            raise CheckpointError(_no_model_in(text, path))
        path = inside[0]
    if path.exists():
        return _from_file(path)
    if text.startswith(("models:/", "runs:/")) or _looks_like_a_run(text):
        return _model_source()(text, tracking_uri)
    raise CheckpointError(
        f"model {text}: no such file, and not an MLflow run id, trial id or models:/ URI"
    )


def _models_in(folder: Path) -> list[Path]:
    return [folder / name for name in (TRAINER_FILE, ENSEMBLE_FILE) if (folder / name).exists()]


def _no_model_in(text: str, folder: Path) -> str:
    """Why the folder ``text`` is no model: a checkpoint of a trial of several models (a
    fused trial's, each member's in its own folder) names them; any other says what a
    model folder holds."""
    try:
        members = sorted(
            (sub for sub in folder.iterdir() if sub.is_dir() and _models_in(sub)),
            key=lambda sub: [int(part) if part.isdigit() else part
                             for part in re.split(r"(\d+)", sub.name)],
        )  # fmt: skip
    except OSError:
        members = []
    if not members:
        return f"model {text}: a folder without {TRAINER_FILE} or {ENSEMBLE_FILE} in it"
    shown = ", ".join(f"{sub.name}/" for sub in members[:8])
    more = f" and {len(members) - 8} more" if len(members) > 8 else ""
    return (
        f"model {text}: a checkpoint of {len(members)} models, one per folder ({shown}{more}: "
        f"a fused trial's members); give one of them, e.g. {folder / members[0].name}"
    )


def _model_source() -> Callable[[str, str | None], EnsembleWeights]:
    """The function that looks a run id or model URI up in a tracking store: the one an
    installed package registers under the ``MODEL_SOURCES`` entry-point group (this
    project's ``analysis.models.fetch_ensemble``, MLflow's). Found through the package
    metadata, so the model library never imports the layers above it."""
    found = sorted(entry_points(group=MODEL_SOURCES), key=lambda point: point.name)
    if not found:
        raise CheckpointError(
            "a run id or model URI needs a tracking-store lookup, and none is installed: "
            f"no entry point in the group {MODEL_SOURCES} (install the project with "
            "`pip install -e .`)"
        )
    source: Callable[[str, str | None], EnsembleWeights] = found[0].load()
    return source


def _looks_like_a_run(text: str) -> bool:
    """A run id (32 hex), a Tune trial id (``8c1f0a2e`` or ``search_trainable_8c1f0_00001``)
    or a run name, as ``analysis.compare`` takes them (``trial-3f2a91c0`` or the whole
    ``trial-3f2a91c0 margin=0.1625``, whose values may hold any character), as opposed
    to a path that does not exist (a folder in it, or a checkpoint's suffix)."""
    if not text.isprintable() or text.endswith((".pt", ".pth")):
        return False
    return text.startswith("trial-") or "/" not in text


def _from_file(path: Path) -> EnsembleWeights:
    """An ensemble file as it is, or a training state's ensemble."""
    try:
        return load_ensemble(path)
    except CheckpointError as not_ensemble:
        if "grounded-training-state" not in str(not_ensemble):
            raise
    state = from_bytes(path, "grounded-training-state", what=str(path))
    try:
        weights = EnsembleWeights.from_training_state(state)
        weights.tokenizer()  # the input its family needs is there
    except ValueError as err:
        raise CheckpointError(f"{path}: {err}") from None
    return weights
