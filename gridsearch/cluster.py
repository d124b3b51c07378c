"""Ray for a search: start or join it, decide what each trial gets, and the run-level
TrainConfig values that follow from the hardware."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import ray

from gridsearch.settings import CPU_SIZED, SMOKE, SearchError, SearchSettings

__all__ = [
    "FUSE_ON_CPU",
    "Resources",
    "fixed_settings",
    "resources_for",
    "start_ray",
    "token_auth_enabled",
]


@dataclass(frozen=True)
class Resources:
    """What each trial gets."""

    cpu: float  # CPUs per trial (its torch threads)
    gpu: float  # GPUs per trial; a fraction packs trials on one GPU
    concurrent: int  # trials at once

    @property
    def gpu_share(self) -> float | None:
        """A trial's fraction of a GPU it shares with others (its memory is capped to it)."""
        return self.gpu if 0 < self.gpu < 1 else None


# what --fuse K does on trials without a GPU (BENCHMARKS.md, "Fused trials": process CPU
# time per epoch, tiny world, k = 2 and 4 at n = 8 and 32: fused 1.3-2.4x the time of
# training the k one after the other; e.g. n = 8, k = 2: 1.0 s against 0.41-0.54 s)
FUSE_ON_CPU = (
    "--fuse {fuse} on CPUs: it does not pay here (a fused trial of 2-4 configurations "
    "measured 1.3-2.4x the CPU time of training them one after the other, BENCHMARKS.md "
    '"Fused trials"); it pays on a GPU, which one small model leaves idle. Leave --fuse off '
    "on a CPU."
)


def ray_start_line(settings: SearchSettings) -> tuple[str, str, str]:
    """What the driver says before ``start_ray``, which takes seconds: what it does, the
    key its duration is measured under (``gridsearch._voice.PhaseTimes``) and a note."""
    if settings.address:
        return f"joining the Ray cluster at {settings.address}", "ray join", ""
    return "starting a local Ray", "ray start", "--address joins a running cluster instead"


def start_ray(settings: SearchSettings) -> str | None:
    """Join ``--address`` or start a local Ray (its dashboard on ``--dashboard-host``,
    localhost unless the user opens it). Returns the dashboard's URL, if any."""
    if settings.address:
        try:
            context = ray.init(
                address=settings.address, log_to_driver=False, configure_logging=False
            )
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise SearchError(
                f"--address {settings.address}: cannot join the Ray cluster ({err})"
            ) from None
    else:
        with _quiet_logger(TOKEN_NOTICE_LOGGER):
            context = ray.init(
                address="local",  # a new local instance, never another process's cluster
                include_dashboard=settings.dashboard,
                dashboard_host=settings.dashboard_host,
                log_to_driver=False,
                configure_logging=False,
            )
    url = context.dashboard_url
    return (url if url.startswith("http") else f"http://{url}") if url else None


# Ray 2.60 turns token authentication on for a new local cluster (unless RAY_AUTH_MODE
# says otherwise) and logs a notice through this logger on every start; on a local start
# that notice is the only warning it can log, and the driver says how to get the token
# where it matters (the dashboard's login). RAY_AUTH_MODE cannot be set instead: Ray
# reads it when imported, and setting it for joining a cluster would break one without.
TOKEN_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"


@contextmanager
def _quiet_logger(name: str) -> Iterator[None]:
    """The logger ``name`` passes errors only, while the block runs."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def token_auth_enabled() -> bool:
    try:  # Ray 2.60 turns token auth on by default for local clusters
        from ray._private.authentication.authentication_utils import is_token_auth_enabled

        return bool(is_token_auth_enabled())
    except ImportError:
        return os.environ.get("RAY_AUTH_MODE") == "token"


def resources_for(settings: SearchSettings) -> Resources:
    """Per-trial CPUs and GPUs (asked for, or from what the cluster has) and how many
    trials run at once."""
    cluster = ray.cluster_resources()
    cpus, gpus = float(cluster.get("CPU", 1)), float(cluster.get("GPU", 0))
    asked = settings.gpus_per_trial
    gpu = asked if asked is not None else (1.0 if gpus else 0.0)
    if gpu > 0 and gpus == 0:
        raise SearchError(f"--gpus-per-trial {gpu}: the Ray cluster has no GPU")
    if gpu > max(gpus, 1) or gpu < 0:
        raise SearchError(
            f"--gpus-per-trial {gpu}: expected 0 to {max(gpus, 1):g} "
            f"(the largest node has at most that many)"
        )
    slots = int(gpus / gpu) if gpu else None
    cpu = settings.cpus_per_trial or (max(1.0, float(int(cpus // slots))) if slots else 1.0)
    if cpu > cpus:
        raise SearchError(f"--cpus-per-trial {cpu:g}: the Ray cluster has {cpus:g} CPUs")
    concurrent = settings.max_concurrent or max(1, min(int(cpus // cpu), slots or 10**6))
    return Resources(cpu, gpu, concurrent)


def fixed_settings(settings: SearchSettings, resources: Resources) -> tuple[dict[str, Any], str]:
    """Run-level TrainConfig values (model size on a CPU or in a smoke test, epochs, seed,
    device, torch threads = the trial's CPUs) and the lines saying which model size and
    whether ``--fuse`` pays on this hardware."""
    fixed: dict[str, Any] = {}
    notes = []
    if settings.smoke_test:
        fixed.update(SMOKE)
    elif resources.gpu == 0 and not settings.full_size:
        fixed.update(CPU_SIZED)
        notes.append(
            f"no GPU: using CPU-sized model settings {CPU_SIZED} (--full-size keeps the "
            "paper's; a space's own parameters still apply)"
        )
    if settings.fuse > 1 and resources.gpu == 0:
        notes.append(FUSE_ON_CPU.format(fuse=settings.fuse))
    note = "\n".join(notes)
    if settings.epochs is not None:
        fixed["epochs"] = settings.epochs
    fixed.setdefault("epochs", 32)
    fixed.update(
        seed=settings.seed,
        device="cuda" if resources.gpu else "cpu",
        threads=max(1, int(resources.cpu)),
        engine=settings.engine,
        recurrence=settings.recurrence,
    )
    return fixed, note
