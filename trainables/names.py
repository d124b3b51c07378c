"""Metric names, defined once and used everywhere downstream: Tune's ``metric=``,
MLflow keys, analysis columns and report tables.

A reported metric is ``"<split>/<name>"``, and the split says what may be done with it:

- ``dev``: after every epoch, the current model on **dev data only** (the store's ``val``
  split, STS-B dev and SICK-R trial). Everything that selects reads these and nothing
  else: the search's objectives, ASHA, the sampler, snapshot choice, the best trial, the
  Pareto front and the report's "best" rows.
- ``test``: after every epoch, the current model on the **test data** (the store's
  ``test`` split every epoch, the semantic battery every ``semantic_every`` epochs), for
  the trade-off curves of the paper's Fig. 4. Reporting only: never selected on.
- ``ensemble``: once, after the last epoch, the snapshot ensemble on the test data: the
  numbers the paper's tables report (plus ``ensemble/size`` and ``ensemble/epoch_<k>``).

The test battery may be computed in the background while training goes on
(``trainables._battery``): its metrics of epoch e then travel with the report of epoch e + 1,
as ``late/<key>`` beside ``late/epoch`` = e (``late``, ``late_metrics``), and whoever records
them (the tracking callback, ``Trainer.history``) files them under epoch e, so they end
up at the same epoch (MLflow step) as when computed in place. ``late/...`` is a carrier,
never a metric of its own.

Retrieval ranks count ties against the query and the median rank is the lower middle
integer (see ``trainables.metrics``), so a collapsed model scores R@K = 0, never 100%.

The two semantic scores are combined differently, for different jobs:

- ``dev/semantic`` = mean of the **cosine Pearson** on STS-B dev and on SICK-R trial
  (``DEV_SEMANTIC_PARTS``): unsupervised, cheap enough for every epoch, and sharing no
  sentence pair with any reported set. It is what the search's semantic objective
  (``dev/semantic_best``) maximises. With only one of the two sets, that one.
- ``test/semantic`` and ``ensemble/semantic`` = ``(sts12_16_pearson + sickr_pearson) / 2``,
  the paper's Fig. 4 combination of STS12-16 (unsupervised cosine) and SICK-R (SentEval's
  supervised protocol) on their test data; with only one of them, that one; with
  neither, ``stsb_pearson``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = [
    "ATTENTION_PENALTY",
    "BASELINES_FILE",
    "BEST_RETRIEVAL",
    "BEST_SEMANTIC",
    "CAPTIONS_PER_S",
    "DEV",
    "DEV_SEMANTIC",
    "DEV_SEMANTIC_PARTS",
    "ENSEMBLE",
    "ENSEMBLE_SIZE",
    "EVAL_SECONDS",
    "FINISHED",
    "LATE",
    "LATE_EPOCH",
    "LEARNING_RATE",
    "LOSS",
    "MEMBERS_FUSED",
    "PRIMARY_RETRIEVAL",
    "PRIMARY_SEMANTIC",
    "RETRIEVAL",
    "SEMANTIC",
    "SPLITS",
    "STS_YEARS",
    "SUPERVISED_TASKS",
    "TEST",
    "TRAIN_SECONDS",
    "TRIAL_FLAGS",
    "best",
    "ensemble_epoch",
    "is_finished",
    "key",
    "late",
    "late_metrics",
    "selectable",
    "spread",
    "subtask_key",
    "task_prefix",
]


DEV = "dev"
TEST = "test"
ENSEMBLE = "ensemble"
SPLITS = (DEV, TEST, ENSEMBLE)

# Retrieval (docs/protocols.md section 5): R@K in percent, ranks 1-based with ties
# counted against the query; medr the lower middle rank (an integer); c2i = caption->image query.
RETRIEVAL = (
    "c2i_r1",
    "c2i_r5",
    "c2i_r10",
    "c2i_medr",
    "c2i_meanr",
    "i2c_r1",
    "i2c_r5",
    "i2c_r10",
    "i2c_medr",
    "i2c_meanr",
    "r10_mean",  # mean of c2i_r10 and i2c_r10: the paper's model-selection score
)

# Semantic (docs/protocols.md section 5): Pearson/Spearman x 1 (not x100), in [-1, 1].
STS_YEARS = ("sts12", "sts13", "sts14", "sts15", "sts16")
SUPERVISED_TASKS = ("stsb", "sickr")  # STS-B and SICK-R, as metric-name prefixes
# The dev score's parts: unsupervised cosine similarity on STS-B dev and SICK-R trial.
DEV_SEMANTIC_PARTS = tuple(f"{task}_cosine_pearson" for task in SUPERVISED_TASKS)
DEV_SEMANTIC = (
    *(f"{task}_cosine_{stat}" for task in SUPERVISED_TASKS for stat in ("pearson", "spearman")),
    "semantic",  # mean of DEV_SEMANTIC_PARTS: the search's semantic objective
)
# The reported battery, on test data (per STS subtask also ``subtask_key`` names).
SEMANTIC = (
    *(f"{year}_pearson" for year in STS_YEARS),  # per year: pair-weighted mean over subtasks
    *(f"{year}_pearson_mean" for year in STS_YEARS),  # per year: plain mean over subtasks
    "sts12_16_pearson",  # mean of the five per-year pair-weighted Pearsons
    # SentEval's supervised protocol (a classifier on [|u-v|, u*v]), test split
    *(f"{task}_{stat}" for task in SUPERVISED_TASKS for stat in ("pearson", "spearman", "mse")),
    # the unsupervised cosine protocol of post-2019 work (SimCSE, MTEB), test split
    *(f"{task}_cosine_{stat}" for task in SUPERVISED_TASKS for stat in ("pearson", "spearman")),
    "semantic",  # (sts12_16_pearson + sickr_pearson) / 2: the paper's Fig. 4 combination
)

# the char n-gram baselines' metrics under these names (trainables.baselines), cached in
# this file beside a store and logged under this name to a search's parent run
BASELINES_FILE = "baselines.json"

LOSS = "train/loss"  # the training objective's loss alone (hinge or Pearson), epoch mean
# with attention_penalty > 0 only: the epoch mean of the attention diversity penalty, which
# the training step adds, times attention_penalty, to the loss it minimises
ATTENTION_PENALTY = "train/attention_penalty"
LEARNING_RATE = "train/lr"
CAPTIONS_PER_S = "train/captions_per_s"
TRAIN_SECONDS = "time/train_s"
EVAL_SECONDS = "time/eval_s"
ENSEMBLE_SIZE = f"{ENSEMBLE}/size"

PRIMARY_RETRIEVAL = f"{DEV}/r10_mean"
PRIMARY_SEMANTIC = f"{DEV}/semantic"
# The search's objectives: the best value of a dev metric over the epochs so far (the
# paper selects on dev retrieval; the semantic score peaks early, so its best matters).
BEST_RETRIEVAL = f"{PRIMARY_RETRIEVAL}_best"
BEST_SEMANTIC = f"{PRIMARY_SEMANTIC}_best"
# Present in a trial's report once its last epoch ran: the ensemble's test R@10 mean.
FINISHED = f"{ENSEMBLE}/r10_mean"


def best(metric: str) -> str:
    """``best("dev/r10_mean") == "dev/r10_mean_best"``."""
    return f"{metric}_best"


def spread(metric: str) -> str:
    """Beside a metric averaged over seeds (``trainables.group``), its sample standard
    deviation over them: ``spread("dev/r10_mean_best") == "dev/r10_mean_best_seed_sd"``."""
    return f"{metric}_seed_sd"


def key(split: str, name: str) -> str:
    """``key("dev", "r10_mean") == "dev/r10_mean"``."""
    return f"{split}/{name}"


# result keys a trial reports beside its metrics (never logged as metrics): whether its
# models (its configurations at their seeds: trainables.group) trained as one fused model
# in that epoch, 1 or 0; and the flag results recorded before this one may hold
MEMBERS_FUSED = "members_fused"
TRIAL_FLAGS = (MEMBERS_FUSED, "seeds_fused")

LATE = "late"  # an earlier epoch's metrics carried by a later report (module docstring)
LATE_EPOCH = f"{LATE}/epoch"  # ... and the epoch they belong to


def late(metric: str) -> str:
    """``metric`` of an earlier epoch, carried by a later report: ``late("test/semantic")
    == "late/test/semantic"``."""
    return f"{LATE}/{metric}"


def late_metrics(
    report: Mapping[str, object], *, from_table: bool = False
) -> tuple[int, dict[str, float]] | None:
    """The earlier epoch a report carries metrics of, and those metrics under their own
    names; None when it carries none (no ``late/epoch``, or a NaN one: a row of a table
    where another report had them). ``from_table``: a row of such a table, where a value
    the report did not carry reads as NaN (left out)::

        >>> late_metrics({"epoch": 3.0, "late/epoch": 2.0, "late/test/semantic": 0.5})
        (2, {'test/semantic': 0.5})
    """
    epoch = report.get(LATE_EPOCH)
    if not isinstance(epoch, int | float) or isinstance(epoch, bool) or epoch != epoch:
        return None
    prefix = f"{LATE}/"
    values = {
        k.removeprefix(prefix): float(v)
        for k, v in report.items()
        if k.startswith(prefix)
        and k != LATE_EPOCH
        and isinstance(v, int | float)
        and not isinstance(v, bool)
        and not (from_table and v != v)
    }
    return int(epoch), values


def ensemble_epoch(k: int) -> str:
    """The epoch of the ensemble's ``k``-th snapshot (1-based): ``ensemble/epoch_1``."""
    return f"{ENSEMBLE}/epoch_{k}"


def subtask_key(year: str, subtask: str, statistic: str) -> str:
    """Per-subtask STS metric name: ``subtask_key("STS12", "surprise.OnWN", "pearson")
    == "sts12_surprise_onwn_pearson"``."""
    slug = re.sub(r"[^a-z0-9]+", "_", subtask.lower()).strip("_")
    return f"{year.lower()}_{slug}_{statistic}"


def task_prefix(task: str) -> str:
    """A supervised task's metric prefix: ``task_prefix("STS-B") == "stsb"``."""
    return re.sub(r"[^a-z0-9]", "", task.lower())


def is_finished(metrics: Mapping[str, object]) -> bool:
    """Whether a trial's report holds its ensemble's test metrics (its last epoch ran)."""
    return FINISHED in metrics


def selectable(metric: str) -> str:
    """``metric`` if a search may select on it (a dev metric or the best of one), else
    ``ValueError``: test and ensemble values are for reporting only."""
    if not metric.startswith(f"{DEV}/"):
        raise ValueError(
            f"{metric!r} cannot be selected on: only {DEV}/ metrics (dev data) may be; "
            f"{TEST}/ and {ENSEMBLE}/ metrics are computed on test data, for reporting"
        )
    return metric
