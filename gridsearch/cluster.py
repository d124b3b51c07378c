"""Ray for a search: start or join it, and decide what each trial gets."""

from __future__ import annotations

import os
from typing import Any

import ray

from gridsearch.settings import CPU_SIZED, SMOKE, SearchError


def start_ray(args: Any) -> str | None:
    """Join ``--address`` or start a local Ray (its dashboard on ``--dashboard-host``,
    localhost unless the user opens it); print where
    the dashboard is and how to log in when Ray's token authentication is on."""
    if args.address:
        try:
            context = ray.init(address=args.address, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise SearchError(
                f"--address {args.address}: cannot join the Ray cluster ({err})"
            ) from None
    else:
        context = ray.init(
            address="local",  # a new local instance, never another process's cluster
            include_dashboard=not args.no_dashboard,
            dashboard_host=args.dashboard_host,
            log_to_driver=False,
            configure_logging=False,
        )
    url = context.dashboard_url
    if url:
        url = url if url.startswith("http") else f"http://{url}"
        print(f"Ray dashboard: {url}", flush=True)
        if _token_auth_enabled():
            print(
                "  token authentication is on: `ray get-auth-token` prints the token to paste "
                "into the dashboard's login",
                flush=True,
            )
    return url


def _token_auth_enabled() -> bool:
    try:  # Ray 2.60 turns token auth on by default for local clusters
        from ray._private.authentication.authentication_utils import is_token_auth_enabled

        return bool(is_token_auth_enabled())
    except ImportError:
        return os.environ.get("RAY_AUTH_MODE") == "token"


def resources_for(args: Any) -> dict[str, float]:
    cluster = ray.cluster_resources()
    cpus, gpus = float(cluster.get("CPU", 1)), float(cluster.get("GPU", 0))
    gpu = args.gpus_per_trial if args.gpus_per_trial is not None else (1.0 if gpus else 0.0)
    if gpu > 0 and gpus == 0:
        raise SearchError(f"--gpus-per-trial {gpu}: the Ray cluster has no GPU")
    if gpu > max(gpus, 1) or gpu < 0:
        raise SearchError(
            f"--gpus-per-trial {gpu}: expected 0 to {max(gpus, 1):g} "
            f"(the largest node has at most that many)"
        )
    slots = int(gpus / gpu) if gpu else None
    cpu = args.cpus_per_trial or (max(1.0, float(int(cpus // slots))) if slots else 1.0)
    if cpu > cpus:
        raise SearchError(f"--cpus-per-trial {cpu:g}: the Ray cluster has {cpus:g} CPUs")
    concurrent = args.max_concurrent or max(1, min(int(cpus // cpu), slots or 10**6))
    return {
        "cpu": cpu,
        "gpu": gpu,
        "concurrent": concurrent,
        "cluster_cpus": cpus,
        "cluster_gpus": gpus,
    }


def fixed_settings(args: Any, resources: dict[str, float]) -> dict[str, Any]:
    """Run-level TrainConfig values: model size on CPU or in a smoke test, epochs, seed,
    device and torch threads (the CPUs given to a trial)."""
    fixed: dict[str, Any] = {}
    if args.smoke_test:
        fixed.update(SMOKE)
    elif resources["gpu"] == 0 and not args.full_size:
        fixed.update(CPU_SIZED)
        print(
            f"no GPU: using CPU-sized model settings {CPU_SIZED} (--full-size keeps the "
            "paper's; a space's own parameters still apply)",
            flush=True,
        )
    if args.epochs is not None:
        fixed["epochs"] = args.epochs
    fixed.setdefault("epochs", 32)
    fixed.update(
        seed=args.seed,
        device="cuda" if resources["gpu"] else "cpu",
        threads=max(1, int(resources["cpu"])),
    )
    return fixed
