"""A trial's snapshot ensemble rebuilt from its ``ensemble.pt`` artifact and evaluated
item by item: per-query retrieval ranks on a store split and per-pair similarity
scores on the semantic sets, for the paired tests of ``analysis.compare``.

The embeddings come from :class:`trainables.loop.Trainer` itself (``embed_split`` and
``embed_fn`` sum the snapshots' embeddings on both sides, as the trial's ensemble
metrics did), so a rebuilt ensemble reproduces the trial's logged test metrics.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import torch
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from analysis._data import AnalysisError, trial_label
from storage.senteval import SemanticBenchmark, SentencePairs
from trainables import names
from trainables.config import TrainConfig
from trainables.data import EncodedSplit, TrainingData
from trainables.loop import Trainer
from trainables.metrics import retrieval_ranks
from trainables.model import GroundedEncoder
from trainables.relatedness import predict_relatedness
from trainables.semantic import EmbeddingTable, cosine_similarity

ENSEMBLE_FILE = "ensemble.pt"


@dataclass(frozen=True, eq=False)
class Ensemble:
    run: Run
    config: TrainConfig
    trainer: Trainer  # holds the evaluation split on the device; never trains
    models: list[GroundedEncoder]  # the snapshots

    @property
    def label(self) -> str:
        return trial_label(self.run)


def fetch_state(client: MlflowClient, run: Run) -> dict[str, Any]:
    """``run``'s ``ensemble.pt`` (config, alphabet, snapshots), checked to hold weights."""
    with tempfile.TemporaryDirectory() as folder:
        try:
            local = client.download_artifacts(run.info.run_id, ENSEMBLE_FILE, folder)
        except Exception as err:  # MLflow raises several kinds for a missing artifact
            raise AnalysisError(
                f"run {trial_label(run)} ({run.info.run_id}) has no {ENSEMBLE_FILE} artifact "
                f"({type(err).__name__}); only finished trials keep their ensemble"
            ) from None
        state: dict[str, Any] = torch.load(Path(local), map_location="cpu", weights_only=True)
    if not state["snapshots"]:
        config = TrainConfig.from_dict(state["config"])
        raise AnalysisError(
            f"run {trial_label(run)}: its {ENSEMBLE_FILE} holds no snapshot (the trial ran "
            f"{config.epochs} epochs, snapshots are taken every {config.snapshot_interval}), "
            "so there are no weights to compare"
        )
    return state


def build_ensemble(run: Run, state: dict[str, Any], split: EncodedSplit, device: str) -> Ensemble:
    """The ensemble of ``state`` (from :func:`fetch_state`) on ``device``, ready to
    evaluate ``split``."""
    config = TrainConfig.from_dict(state["config"])
    # An evaluation-only Trainer: the split stands in for all three; batch_size and
    # threads do not change an embedding.
    eval_config = config.replace(
        device=device, batch_size=min(config.batch_size, max(split.num_images, 2)), threads=0
    )
    trainer = Trainer(eval_config, TrainingData(split, split, split, unknown_chars=0, source=""))
    models = [trainer._model_from(s["state"]) for s in state["snapshots"]]
    return Ensemble(run, config, trainer, models)


def ranks(ensemble: Ensemble) -> tuple[np.ndarray, np.ndarray]:
    """Per-query ranks ``(c2i (5N,), i2c (N,))`` of the ensemble on the split."""
    with torch.inference_mode():
        images, captions = ensemble.trainer.embed_split(
            ensemble.trainer.test_split, ensemble.models
        )
        return retrieval_ranks(images, captions)


# Semantic metric name (``names``, no split) -> (predicted scores, gold scores) per pair.
Scores: TypeAlias = dict[str, tuple[np.ndarray, np.ndarray]]


def semantic_scores(ensemble: Ensemble, bench: SemanticBenchmark) -> Scores:
    """Per pair: the cosine similarity of the two sentences' embeddings for every STS
    subtask and for the STS-B and SICK-R test pairs, and the supervised protocol's test
    predictions for STS-B and SICK-R (``trainables.relatedness.predict_relatedness``, with
    the trial's seed and STS-B encoding, so the same numbers as its test metrics)."""
    table = EmbeddingTable.build(ensemble.trainer.embed_fn(ensemble.models), bench.sentences())
    scores: Scores = {}

    def cosine(pairs: SentencePairs) -> tuple[np.ndarray, np.ndarray]:
        return cosine_similarity(table(pairs.sentences1), table(pairs.sentences2)), pairs.gold

    for year, subtasks in bench.sts.items():
        for subtask, pairs in subtasks.items():
            scores[names.subtask_key(year, subtask, "pearson")] = cosine(pairs)
    for task in bench.supervised.values():
        prefix = names.task_prefix(task.name)
        encoding = ensemble.config.stsb_encoding if task.name == "STS-B" else "senteval"
        predicted = predict_relatedness(
            table,
            task,
            device=ensemble.trainer.device,
            seed=ensemble.config.seed,
            encoding=encoding,
        )
        scores[f"{prefix}_pearson"] = (predicted, task.test.gold)
        scores[f"{prefix}_cosine_pearson"] = cosine(task.test)
    return scores
