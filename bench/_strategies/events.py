"""What a search did, as the comparison keeps it: every epoch report in the order Tune
processed them, recorded by a Tune callback, stopped at the budget, saved to a file."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray import tune

from bench import tabular
from bench._cli import BadInput
from bench.bench_search_efficiency import hypervolume
from trainables import names

# The objectives a report holds, in its order after (trial id, epoch).
REPORTED = (names.BEST_RETRIEVAL, names.BEST_SEMANTIC)


@dataclass
class Events:
    """What a search did: every epoch report in the order Tune processed them."""

    # (trial id, epoch, dev/r10_mean_best, dev/semantic_best): REPORTED
    reports: list[tuple[str, int, float, float]]
    configs: dict[str, tuple[str, float]]  # trial id -> (variant, margin)
    cost: int = 1  # trial-epochs one report stands for (the seeds per config)

    def decisions(self) -> list[tuple[str, float, int]]:
        """(variant, margin, last epoch reported) of every trial, sorted."""
        last: dict[str, int] = {}
        for trial, epoch, *_ in self.reports:
            last[trial] = max(epoch, last.get(trial, 0))
        return sorted((*self.configs[t], e) for t, e in last.items())

    def values(self, metric: str) -> list[tuple[str, int, float]]:
        """(trial id, epoch, ``metric``) of every report, ``metric`` one of ``REPORTED``
        (a report without it: -inf)."""
        if metric not in REPORTED:
            raise ValueError(f"{metric!r}: a search's reports hold {', '.join(REPORTED)}")
        first = metric == REPORTED[0]
        return [(t, e, finite(one if first else other)) for t, e, one, other in self.reports]

    def curve(self, metric: str) -> list[float]:
        """Best ``metric`` found after each trained trial-epoch (index 0 = 1 epoch)."""
        best, out = -math.inf, []
        for _, epoch, value in self.values(metric):
            if epoch < 1:
                continue
            best = max(best, value)
            out += [best] * self.cost
        return out

    def incumbents(self, metric: str) -> list[tuple[str, float]]:
        """The config the search would pick (the best ``metric`` so far) after each
        trained trial-epoch."""
        best, pick, out = -math.inf, ("", 0.0), []
        for trial, epoch, value in self.values(metric):
            if value > best:
                best, pick = value, self.configs[trial]
            if epoch >= 1:
                out += [pick] * self.cost
        return out

    def hypervolumes(self, ref: tuple[float, float]) -> list[float]:
        """The hypervolume above ``ref`` of every trial's latest (dev R@10 mean best, dev
        semantic best) after each trained trial-epoch."""
        latest: dict[str, tuple[float, float]] = {}
        out = []
        for trial, epoch, retrieval, semantic in self.reports:
            latest[trial] = (retrieval, finite(semantic))
            if epoch >= 1:
                out += [hypervolume(list(latest.values()), ref)] * self.cost
        return out


def finite(value: float) -> float:
    return -math.inf if math.isnan(value) else value


class Recorder(tune.Callback):
    """Every epoch report's ``REPORTED`` values; those of the search's objective
    (``objective``, its metric or metrics) must be there, the other may be missing (NaN)."""

    def __init__(self, objective: str | Sequence[str], decode: Any = None) -> None:
        self.reports: list[tuple[str, int, float, float]] = []
        self.configs: dict[str, tuple[str, float]] = {}
        self.decode = decode or tabular.variant_margin
        self.required = {objective} if isinstance(objective, str) else set(objective)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info):
        self.configs[trial.trial_id] = self.decode(trial.config)
        retrieval, semantic = (
            result[m] if m in self.required else result.get(m, math.nan) for m in REPORTED
        )
        self.reports.append((trial.trial_id, int(result["epoch"]), retrieval, semantic))


class Budget(tune.Stopper):
    """Stops the whole search once the trial-epochs spent reach the budget."""

    def __init__(self, budget: int, recorder: Recorder, cost: int = 1) -> None:
        self.budget, self.recorder, self.cost = budget, recorder, cost

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        return self.cost * sum(r[1] >= 1 for r in self.recorder.reports) >= self.budget


class SavedSearches:
    """Finished searches kept in a JSON-lines file (``--results``), so that a long
    comparison survives a crash or a new strategy and its tables can be printed again.
    A line holds the search's settings (``key``: what changes its events), the strategy,
    the search seed and its :class:`Events`; only lines with this run's key are read.
    ``path`` None: nothing is kept."""

    def __init__(self, path: Path | None, key: dict[str, Any]) -> None:
        self.path, self.key = path, json.loads(json.dumps(key))
        self.found: dict[tuple[str, int], Events] = {}
        if path is None or not path.exists():
            return
        for number, line in enumerate(path.read_text().splitlines(), 1):
            try:
                row = json.loads(line)
                reports = [(str(t), int(e), float(r), float(m)) for t, e, r, m in row["reports"]]
                configs = {t: (str(v), float(mg)) for t, (v, mg) in row["configs"].items()}
                events = Events(reports, configs, int(row["cost"]))
                found = (str(row["strategy"]), int(row["seed"]))
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise BadInput(f"error: --results {path}: line {number} is not a saved "
                               f"search ({e})") from None  # fmt: skip
            if row.get("key") == self.key:
                self.found[found] = events

    def get(self, strategy: str, seed: int) -> Events | None:
        return self.found.get((strategy, seed))

    def add(self, strategy: str, seed: int, events: Events) -> None:
        if self.path is None:
            return
        row = {"key": self.key, "strategy": strategy, "seed": seed, "cost": events.cost,
               "reports": events.reports, "configs": events.configs}  # fmt: skip
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
