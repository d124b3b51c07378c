"""A readable progress view: one line per reported epoch and per finished trial, handed
to a ``write`` function (``gridsearch.run`` passes ``print``; a library caller passes its
own, or nothing)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ray.tune import Callback
from ray.tune.experiment import Trial

from trainables import names

__all__ = ["ProgressPrinter"]


class ProgressPrinter(Callback):
    def __init__(self, searched: list[str], epochs: int, write: Callable[[str], None]) -> None:
        self.searched = searched  # the parameters worth showing per trial
        self.epochs = epochs
        self.write = write
        self.started = time.perf_counter()

    def _print(self, text: str) -> None:
        self.write(f"[{time.perf_counter() - self.started:6.1f}s] {text}")

    def _label(self, trial: Trial) -> str:
        shown = " ".join(
            _format(k, trial.config.get(k)) for k in self.searched if k in trial.config
        )
        return f"{trial.trial_id} {shown}".rstrip()

    def on_trial_start(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self._print(f"start   {self._label(trial)}")

    def on_trial_result(
        self, iteration: int, trials: list[Trial], trial: Trial, result: dict[str, Any], **info: Any
    ) -> None:
        if "epoch" not in result:
            return
        parts = [f"epoch {int(result['epoch'])}/{self.epochs}"]
        for label, key in (
            ("dev R@10", names.PRIMARY_RETRIEVAL),
            ("semantic", names.PRIMARY_SEMANTIC),
        ):
            if key in result:
                parts.append(
                    f"{label} {result[key]:.3f}"
                    if "semantic" in key
                    else f"{label} {result[key]:.1f}"
                )
        self._print(f"        {trial.trial_id} " + "  ".join(parts))

    def on_trial_complete(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        result = trial.last_result or {}
        done = names.is_finished(result)
        status = (
            f"done    test R@10 mean {result[names.FINISHED]:.1f} (ensemble)"
            if done
            else f"stopped early after epoch {int(result.get('epoch', 0))}"
        )
        self._print(f"{status}  {self._label(trial)}")

    def on_trial_error(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        error = trial.get_error()
        reason = str(error).strip().splitlines()[-1][:200] if error else "unknown error"
        self._print(f"FAILED  {self._label(trial)}: {reason}")


def _format(key: str, value: Any) -> str:
    return f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}"
