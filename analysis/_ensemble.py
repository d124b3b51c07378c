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
from storage.senteval import SemanticBenchmark, SupervisedTask
from trainables import names
from trainables.config import TrainConfig
from trainables.data import EncodedSplit, TrainingData
from trainables.loop import Trainer
from trainables.metrics import retrieval_ranks
from trainables.model import GroundedEncoder
from trainables.semantic import (
    EmbeddingTable,
    RelatednessProtocol,
    _cosine,
    _cpu_threads,
    _expected_score,
    _fit,
    from_class_scale,
    relatedness_targets,
)

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
    subtask, and the supervised protocol's test predictions for STS-B and SICK-R (as
    ``trainables.semantic.supervised_relatedness`` computes them, same seed)."""
    table = EmbeddingTable.build(ensemble.trainer.embed_fn(ensemble.models), bench.sentences())
    scores: Scores = {}
    for year, subtasks in bench.sts.items():
        for subtask, pairs in subtasks.items():
            sims = _cosine(table(pairs.sentences1), table(pairs.sentences2))
            scores[names.subtask_key(year, subtask, "pearson")] = (sims, pairs.gold)
    for task in bench.supervised.values():
        key = f"{task.name.lower().replace('-', '')}_pearson"
        scores[key] = (_relatedness_predictions(table, task, ensemble), task.test.gold)
    return scores


def _relatedness_predictions(
    table: EmbeddingTable, task: SupervisedTask, ensemble: Ensemble
) -> np.ndarray:
    """The test predictions of ``supervised_relatedness`` (which returns only their
    correlations), with the same steps, seed and device as the trial's evaluation."""
    device = ensemble.trainer.device

    def features(sentences1: tuple[str, ...], sentences2: tuple[str, ...]) -> torch.Tensor:
        u = table(sentences1).to(device, torch.float32)
        v = table(sentences2).to(device, torch.float32)
        return torch.cat([(u - v).abs(), u * v, torch.ones_like(u[:, :1])], dim=1)

    target = relatedness_targets(task.train.gold, task.score_range).astype(np.float32)
    with _cpu_threads(1, device):  # the evaluator's default, so the fit is the same
        weights = _fit(
            (
                features(task.train.sentences1, task.train.sentences2),
                torch.tensor(target, device=device),
            ),
            (
                features(task.dev.sentences1, task.dev.sentences2),
                torch.tensor(task.dev.gold, device=device),
            ),
            RelatednessProtocol(),
            torch.Generator().manual_seed(ensemble.config.seed),
            task.name,
        )
        test = _expected_score(weights, features(task.test.sentences1, task.test.sentences2))
    return from_class_scale(test.double().cpu().numpy(), task.score_range)
