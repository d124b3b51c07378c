"""The Ray Tune function trainable: a thin wrapper around :class:`Trainer`.

It builds the typed config from Tune's dict (unknown keys are refused), takes the data
that the driver put into Ray's object store once (``tune.with_parameters``; Ray copies
it to each node once, and the trials on a node share it), reports every epoch with a
checkpoint, and resumes from ``tune.get_checkpoint()``::

    trainable = tune.with_parameters(grounded_trainable, data=data, senteval=benchmark)

``data`` may instead be a store URI that every node can read (shared storage, ``s3://``,
``gs://``): each trial process then reads the shards itself. ``senteval`` is a loaded
:class:`~storage.senteval.SemanticBenchmark` (shipped the same way) or a directory
every node can read. With ``seeds_per_config`` k > 1 the trial trains its configuration
at k seeds side by side and reports their mean and spread (``trainables.seeds``).
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

import torch
from ray import tune

from storage.senteval import SemanticBenchmark
from trainables.config import TrainConfig
from trainables.data import TrainingData
from trainables.seeds import SeedGroup

__all__ = [
    "grounded_trainable",
]


def grounded_trainable(
    config: dict[str, Any],
    data: TrainingData | str,
    senteval: SemanticBenchmark | str | None = None,
    gpu_share: float | None = None,
    verify: bool = True,
    helpers: Collection[str] = (),
    seeds_per_config: int = 1,
    complete_at: Collection[int] = (),
) -> None:
    """``gpu_share``: this trial's fraction of a GPU packed with others; its memory is
    capped to that share so one trial cannot starve the rest. ``verify``: check a store
    read by the trial itself against its manifest's checksums. ``helpers``: the keys of
    ``config`` that are the search space's own parameters, not TrainConfig's (Optuna puts
    them beside the TrainConfig keys they were decoded into); every other key must be a
    TrainConfig field. ``seeds_per_config``: train the configuration at that many seeds
    (``seed``, ``seed + 1``, ...) and report their mean (``trainables.seeds``).
    ``complete_at``: the epochs where the scheduler may stop the trial (ASHA's rungs),
    whose reports must hold their own test battery (``trainables.loop``: elsewhere an
    epoch's battery may come with the next report)."""
    train_config = TrainConfig.from_dict({k: v for k, v in config.items() if k not in helpers})
    if gpu_share is not None and torch.cuda.is_available():
        torch.cuda.set_per_process_memory_fraction(gpu_share)
    if isinstance(data, str):
        data = _read_store(data, verify)
    group = SeedGroup(train_config, data, senteval, seeds_per_config, complete_at=complete_at)
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            group.load(Path(folder))
    for metrics in group.run():
        with tempfile.TemporaryDirectory() as folder:
            group.save(Path(folder))
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))


@functools.lru_cache(maxsize=1)
def _read_store(uri: str, verify: bool) -> TrainingData:
    """A store read by the trial itself, once per worker process."""
    return TrainingData.from_store(uri, verify=verify)
