"""A trial's snapshot ensemble rebuilt from its ``ensemble.pt`` artifact and evaluated
item by item: per-query retrieval ranks on a store split and per-pair similarity
scores on the semantic sets, for the paired tests of ``analysis.compare``.

The file is read by ``trainables.checkpoint`` and embedded by ``trainables.embedding``,
the functions the trial's own evaluation used (the snapshots' embeddings summed on both
sides), so a rebuilt ensemble reproduces the trial's logged test metrics.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

import numpy as np
import torch
from mlflow.entities import Run
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from analysis._data import AnalysisError, check_own_artifacts, trial_label
from storage.senteval import SemanticBenchmark, SentencePairs
from trainables import names
from trainables.checkpoint import ENSEMBLE_FILE, CheckpointError, EnsembleWeights, load_ensemble
from trainables.data import EncodedSplit
from trainables.device import resolve_device
from trainables.embedding import embed_captions, embed_images, embed_sentences
from trainables.metrics import retrieval_ranks
from trainables.model import GroundedEncoder
from trainables.relatedness import predict_relatedness
from trainables.semantic import EmbeddingTable, cosine_similarity


@dataclass(frozen=True, eq=False)
class Ensemble:
    run: Run
    weights: EnsembleWeights
    models: list[GroundedEncoder]  # the snapshots, on the evaluation device
    split: EncodedSplit  # what retrieval is evaluated on

    @property
    def label(self) -> str:
        return trial_label(self.run)

    @property
    def device(self) -> torch.device:
        return next(self.models[0].parameters()).device


def fetch_weights(client: MlflowClient, run: Run) -> EnsembleWeights:
    """``run``'s ``ensemble.pt``, read and checked by ``trainables.checkpoint``; never
    from the runs directory a copy of it still names (``check_own_artifacts``)."""
    check_own_artifacts(client.tracking_uri, run.info.artifact_uri, f"run {trial_label(run)}")
    with tempfile.TemporaryDirectory() as folder:
        try:
            local = client.download_artifacts(run.info.run_id, ENSEMBLE_FILE, folder)
        except (MlflowException, OSError) as err:
            raise AnalysisError(
                f"run {trial_label(run)} ({run.info.run_id}) has no {ENSEMBLE_FILE} artifact "
                f"({type(err).__name__}); a trial keeps one once it has evaluated an epoch"
            ) from None
        try:
            return load_ensemble(Path(local), what=f"run {trial_label(run)}: {ENSEMBLE_FILE}")
        except CheckpointError as err:
            raise AnalysisError(str(err)) from None


def build_ensemble(
    run: Run, weights: EnsembleWeights, split: EncodedSplit, device: str
) -> Ensemble:
    """The ensemble of ``weights`` (from :func:`fetch_weights`) on ``device``, ready to
    evaluate ``split``."""
    try:
        where = resolve_device(device)
    except ValueError as err:
        raise AnalysisError(f"--device {device}: {err}") from None
    return Ensemble(run, weights, weights.models(where), split)


def ranks(ensemble: Ensemble) -> tuple[np.ndarray, np.ndarray]:
    """Per-query ranks ``(c2i (5N,), i2c (N,))`` of the ensemble on its split."""
    split, config = ensemble.split, ensemble.weights.config
    # each ensemble reads the captions with its own tokenizer (characters or its words)
    tokens, lengths = ensemble.weights.tokenizer().encode(list(split.captions))
    images = embed_images(ensemble.models, torch.from_numpy(split.features))
    captions = embed_captions(
        ensemble.models,
        torch.from_numpy(tokens),
        torch.from_numpy(lengths),
        batch_size=config.eval_batch_size,
        precision=config.precision,
    )
    return retrieval_ranks(images, captions)


# Semantic metric name (``names``, no split) -> (predicted scores, gold scores) per pair.
Scores: TypeAlias = dict[str, tuple[np.ndarray, np.ndarray]]


def semantic_scores(ensemble: Ensemble, bench: SemanticBenchmark) -> Scores:
    """Per pair: the cosine similarity of the two sentences' embeddings for every STS
    subtask and for the STS-B and SICK-R test pairs, and the supervised protocol's test
    predictions for STS-B and SICK-R (``trainables.relatedness.predict_relatedness``, with
    the trial's seed and STS-B encoding, so the same numbers as its test metrics), of the
    ensemble's summed embeddings L2-normalised, as its saved model encodes by default and
    as its logged semantic scores are."""
    config = ensemble.weights.config

    def embed(sentences: Sequence[str]) -> torch.Tensor:  # as the saved model encodes them
        summed = embed_sentences(
            ensemble.models,
            sentences,
            batch_size=config.eval_batch_size,
            precision=config.precision,
        )
        return torch.nn.functional.normalize(summed, dim=1)

    table = EmbeddingTable.build(embed, bench.sentences())
    scores: Scores = {}

    def cosine(pairs: SentencePairs) -> tuple[np.ndarray, np.ndarray]:
        return cosine_similarity(table(pairs.sentences1), table(pairs.sentences2)), pairs.gold

    for year, subtasks in bench.sts.items():
        for subtask, pairs in subtasks.items():
            scores[names.subtask_key(year, subtask, "pearson")] = cosine(pairs)
    for task in bench.supervised.values():
        prefix = names.task_prefix(task.name)
        encoding = config.stsb_encoding if task.name == "STS-B" else "senteval"
        predicted = predict_relatedness(
            table, task, device=ensemble.device, seed=config.seed, encoding=encoding
        )
        scores[f"{prefix}_pearson"] = (predicted, task.test.gold)
        scores[f"{prefix}_cosine_pearson"] = cosine(task.test)
    return scores
