"""What a search reads and checks before anything runs: its space, its Tune experiment
(new or resumable), the tracking store, the data and the semantic sets. Every problem is
a ``SearchError`` naming the flag, raised before Ray starts or any trial runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray import tune

from gridsearch._store import TrackingError, check_reachable
from gridsearch.settings import SMOKE_WORLD_IMAGES, SearchError, SearchSettings
from gridsearch.spaces import SearchSpace, get_space, load_space_file
from storage import FeatureStore, StoreError
from storage.build import build_synthetic
from storage.senteval import SemanticBenchmark, load_senteval
from trainables.data import TrainingData, default_senteval
from trainables.semantic import DevSemanticEvaluator

__all__ = [
    "check_experiment_path",
    "load_benchmark",
    "load_data",
    "load_space",
    "tracking_client",
]

Write = Callable[[str], None]


def load_space(settings: SearchSettings) -> SearchSpace:
    try:
        if settings.space_file is not None:
            return load_space_file(settings.space_file)
        assert settings.space is not None
        return get_space(settings.space)
    except ValueError as err:
        raise SearchError(str(err)) from None


def check_experiment_path(settings: SearchSettings) -> None:
    path = settings.experiment_path
    exists = tune.Tuner.can_restore(path)
    if settings.resume and not exists:
        raise SearchError(
            f"--resume: {path} holds no Tune experiment to continue; check "
            "--experiment and --storage-path"
        )
    if not settings.resume and exists:
        raise SearchError(
            f"{path} already holds a search; continue it with --resume or choose "
            "another --experiment"
        )


def tracking_client(settings: SearchSettings) -> Any:
    settings.layout.root.mkdir(parents=True, exist_ok=True)  # the default sqlite file lives here
    try:
        return check_reachable(settings.tracking_uri)
    except TrackingError as err:
        raise SearchError(str(err)) from None


def load_data(settings: SearchSettings, write: Write) -> tuple[str, str | None, TrainingData | str]:
    """The store to train on, the semantic sets to evaluate on, and what the trials get:
    the data read here once (``--data-via object-store``; Ray ships it once per node) or
    the store's URI (``uri``; every trial reads it). Either way every shard is checked
    against the manifest's sha256 (unless ``--no-verify``) before any trial starts."""
    try:
        store = settings.data
        if store is None:
            world = settings.layout.world(settings.smoke_test)
            write(f"data: the embedded world in {world} (built once, then reused)")
            build_synthetic(world, images=SMOKE_WORLD_IMAGES if settings.smoke_test else 2000)
            store = str(world)
        senteval = settings.senteval or default_senteval(store)
        data: TrainingData | str = store
        if settings.data_via == "uri":
            if settings.verify:
                FeatureStore.open(store).verify()
        else:
            data = TrainingData.from_store(store, verify=settings.verify)
    except StoreError as err:
        raise SearchError(f"{'--data' if settings.data else 'the embedded world'}: {err}") from None
    if senteval is not None and not Path(senteval).is_dir():
        raise SearchError(f"--senteval {senteval}: not a directory")
    return store, senteval, data


def load_benchmark(senteval: str | None, objective: str) -> SemanticBenchmark | None:
    """The semantic sets, loaded once here and shipped with the data, so that no worker
    node needs the directory; a semantic objective needs their dev sets."""
    benchmark = None
    if senteval is not None:
        try:
            benchmark = load_senteval(senteval)
        except StoreError as err:
            raise SearchError(f"--senteval: {err}") from None
    if objective != "retrieval" and (benchmark is None or not DevSemanticEvaluator(benchmark)):
        raise SearchError(
            f"--objective {objective}: the semantic objective is the dev score on STS-B dev "
            "and SICK-R trial, and "
            + (
                "no semantic sets were given (--senteval DIR)"
                if benchmark is None
                else f"{senteval} has neither STS/STSBenchmark nor SICK"
            )
        )
    return benchmark
