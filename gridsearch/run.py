"""``python -m gridsearch.run``: the distributed hyperparameter search.

    python -m gridsearch.run --space margin_sweep
    python -m gridsearch.run --space paper_grid --data stores/flickr8k \
        --senteval SentEval/data/downstream
    python -m gridsearch.run --space full --objective both --num-samples 64 --address auto
    python -m gridsearch.run --experiment margin_sweep-20261122-101500 --resume

Optuna (through Ray Tune's OptunaSearch) samples the space; Ray Tune runs the trials on
this machine or a Ray cluster; the driver records every trial in MLflow (one parent run
per search, a nested run per trial). Without --data the embedded world is built once
(cached) and used. See ``--help`` and the README for every option.
"""

from __future__ import annotations

import logging
import os
import sys
import time

# Our own progress view replaces Tune's tables; Tune's snapshot-frequency warning is
# expected (every epoch reports a checkpoint and only the last two are kept).
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
# MLflow sets its logger to INFO when imported; its database set-up lines are not ours.
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")

from gridsearch.settings import SearchError, SearchSettings, parse_args

logger = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list_spaces:
        from gridsearch.spaces import list_spaces

        print(list_spaces())
        return 0
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("mlflow", "alembic"):  # their INFO lines (database set-up) are not ours
        logging.getLogger(noisy).setLevel(logging.WARNING)
    started = time.perf_counter()
    try:
        settings = SearchSettings.from_args(args)
        from gridsearch.driver import run_search

        run_search(settings, started)
    except SearchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "interrupted: continue this search with --experiment "
            f"{getattr(args, 'experiment', None) or 'NAME'} --resume",
            file=sys.stderr,
        )
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
