"""What a search reads and checks before anything runs: its space, its Tune experiment
(new or resumable), the tracking store, the data and the semantic sets. Every problem is
a ``SearchError`` naming the flag, raised before Ray starts or any trial runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray import tune

from gridsearch import _damage, _runs_checks
from gridsearch._lock import setup_lock
from gridsearch._voice import Voice
from gridsearch.settings import SMOKE_WORLD_IMAGES, SearchError, SearchSettings
from gridsearch.tracking import TrackingError, check_reachable
from storage import FeatureStore, StoreError, build_synthetic
from storage.senteval import SemanticBenchmark, load_senteval
from storage.synthetic import GENERATOR_VERSION
from trainables.data import TrainingData, default_senteval
from trainables.semantic import DevSemanticEvaluator

__all__ = [
    "check_experiment_path",
    "load_benchmark",
    "load_data",
    "prepare_runs_dir",
    "store_size",
    "tracking_client",
]


def check_experiment_path(settings: SearchSettings) -> None:
    """A ``--resume`` needs a Tune experiment to continue; a new search needs its name
    free (no Tune experiment, no record of a search that started under it)."""
    path = settings.experiment_path
    try:
        exists = tune.Tuner.can_restore(path)
    except (OSError, ValueError) as err:  # a storage URI pyarrow cannot open
        raise SearchError(
            f"--storage-path {settings.storage_path}: cannot be used ({err})"
        ) from None
    if settings.resume and not exists:
        raise SearchError(
            f"--resume: {path} holds no Tune experiment to continue; check "
            "--experiment and --storage-path"
        )
    started = settings.layout.record(settings.experiment).exists()
    if not settings.resume and (exists or started):
        raise SearchError(
            f"{path if exists else settings.layout.record(settings.experiment)} already holds "
            "a search; continue it with --resume or choose another --experiment"
        )


def prepare_runs_dir(settings: SearchSettings) -> None:
    """Everything a runs directory is checked for before the search writes anything or
    Ray starts: every folder it writes can hold it (``_runs_checks.check_folders``); for
    a ``--resume``, every state file is whole (``_damage``, read only) and runs nothing
    when read back (``_runs_checks.check_state_files``), also in a copied or moved runs
    directory, before ``_relocate.relocate`` rewrites anything. Then the runs directory is
    made."""
    _runs_checks.check_folders(settings)
    if settings.resume:
        _damage.check_resume_state(settings, repair=False)
        _runs_checks.check_state_files(settings)
    root = settings.layout.root
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SearchError(
            f"--runs-dir {root}: not a writable directory ({err.strerror or err})"
        ) from None


def tracking_client(settings: SearchSettings) -> Any:
    """A client of the tracking store, which answers (created here when it is the runs
    directory's sqlite file)."""
    try:
        return check_reachable(settings.tracking_uri)
    except TrackingError as err:
        raise SearchError(str(err)) from None


def store_size(store: str) -> str:
    """A store's size as the phases' measured durations are keyed by it
    (``gridsearch._voice.PhaseTimes``): its data set and image count."""
    try:
        manifest = FeatureStore.open(store).manifest
    except StoreError:
        return "an unreadable store"
    images = sum(split.images for split in manifest.splits.values())
    return f"{manifest.dataset} {images} images"


def load_data(settings: SearchSettings, voice: Voice) -> tuple[str, str | None, TrainingData | str]:
    """The store to train on, the semantic sets to evaluate on, and what the trials get:
    the data read here once (``--data-via object-store``; Ray ships it once per node) or
    the store's URI (``uri``; every trial reads it). Either way every shard is checked
    against the manifest's sha256 (unless ``--no-verify``) before any trial starts.
    ``voice`` says what is being done (building the embedded world, reading the store)."""
    try:
        store = settings.data
        if store is None:
            store = _world(settings, voice)
        senteval = settings.senteval or default_senteval(store)
        data: TrainingData | str = store
        checks = "every shard's sha256 checked" if settings.verify else "--no-verify"
        if settings.data_via == "uri":
            if settings.verify:
                checking = f"checking the store {store} ({checks})"
                with voice.phase(checking, f"check {store_size(store)}"):
                    FeatureStore.open(store).verify()
        else:
            reading = f"reading the store {store} into memory ({checks})"
            with voice.phase(reading, f"read {store_size(store)}"):
                data = TrainingData.from_store(store, verify=settings.verify)
    except StoreError as err:
        raise SearchError(f"{'--data' if settings.data else 'the embedded world'}: {err}") from None
    if senteval is not None and not Path(senteval).is_dir():
        raise SearchError(f"--senteval {senteval}: not a directory")
    return store, senteval, data


def _world(settings: SearchSettings, voice: Voice) -> str:
    """The embedded world's store, built here unless an earlier search built it."""
    world = settings.layout.world(settings.smoke_test)
    images = SMOKE_WORLD_IMAGES if settings.smoke_test else 2000
    # one builder at a time: two drivers starting side by side in one runs directory
    # would each clear the other's temporary files
    with setup_lock(settings.layout.root / "locks" / f"{world.name}.flock"):
        try:
            built = FeatureStore.open(world).manifest.build.get("generator")
        except StoreError:  # not built yet (or a build was cut short: it goes on)
            building = f"building the embedded world ({images:,} images) in {world}"
            once, key = "once: later searches reuse it", f"world {images} images"
            with voice.phase(building, key, say=f"data: {building}", note=once):
                build_synthetic(world, images=images)
        else:
            # kept, so that the searches of one runs directory stay comparable; said, so
            # that a world from an older version of the generator is not taken for today's
            older = (
                ""
                if built == GENERATOR_VERSION
                else f"; its generator is version {built}, this code's {GENERATOR_VERSION}, "
                "whose world a new --runs-dir builds"
            )
            voice(f"data: the embedded world in {world} (built earlier, reused{older})")
    return str(world)


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
