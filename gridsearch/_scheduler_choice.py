"""Which scheduler a search uses when ``--scheduler`` is left at ``auto`` (no Ray here:
the argument parser reads it).

The default is what the recorded benchmark measured best (BENCHMARKS.md, "Search
strategies on a recorded problem", 20 search seeds each): for one objective, FIFO when
trials train fewer than ``FIFO_BELOW_EPOCHS`` epochs (at 4 epochs in 1-epoch cycles ASHA's
rungs at epochs 1 and 2 stopped the max-pooled models, which start slowest and end best:
7 of 20 seeds reached the grid's best within half the grid's trial-epochs, against 20 of
20 without early stopping), ASHA from there on (at 8 epochs it reached the grid's best
in 17.6% of the grid's trial-epochs, one search seed: BENCHMARKS.md, "Search
efficiency"); for two objectives, Pareto-rank halving at any length (18 of 20 seeds reached
99% of the grid's hypervolume, against 14 of 20 with FIFO).

Which is better depends on the problem: on the second recorded problem (learning-rate
bounds x batch size), where a bad rate shows from the first epoch, ASHA got 13 of 20
seeds within 1% and FIFO 4 of 20. Over both problems FIFO got 24 of 40 and ASHA 20 of 40,
so the rule stays; a space whose parameters show their effect early wants ``asha``.
"""

from __future__ import annotations

__all__ = ["FIFO_BELOW_EPOCHS", "SCHEDULERS", "resolve_scheduler"]

SCHEDULERS = ("auto", "asha", "fifo")
FIFO_BELOW_EPOCHS = 8  # "auto", one objective: no early stopping in runs shorter than this


def resolve_scheduler(kind: str, objective: str, epochs: int) -> str:
    """ "asha" or "fifo": ``kind`` itself, or for "auto" the measured default (see the
    module docstring): "asha" for the objective "both", else "fifo" under
    ``FIFO_BELOW_EPOCHS`` epochs and "asha" from there on."""
    if kind not in SCHEDULERS:
        raise ValueError(f"scheduler: got {kind!r}, expected one of {', '.join(SCHEDULERS)}")
    if kind != "auto":
        return kind
    if objective == "both" or epochs >= FIFO_BELOW_EPOCHS:
        return "asha"
    return "fifo"
