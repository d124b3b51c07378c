"""What the report's figures share: the resolution, the markers and dashes of the trials'
and the baselines' lines, a legend below the axes, the untrained evaluation's place on the
epoch axis, and ``save``, which writes a figure as a PNG (``analysis._figures``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from gridsearch.tracking import EPOCH_ZERO_AT

__all__ = [
    "DASHES",
    "DPI",
    "MARKERS",
    "REFERENCE_STYLES",
    "colours",
    "epoch_x",
    "legend_below",
    "save",
    "trial_styles",
]

DPI = 100
# per trial on the overlaid curves (with its colour), so that coinciding curves show
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")
DASHES: tuple[Literal["-", "--", ":", "-."], ...] = ("-", "--", ":", "-.")
# the baselines': dash patterns no trial's line has (long dashes, dash-dot-dot, sparse
# dots), grey and without markers
REFERENCE_STYLES: tuple[tuple[float, tuple[float, ...]], ...] = (
    (0, (10, 3)),
    (0, (7, 2, 1.5, 2, 1.5, 2)),
    (0, (1, 4)),
)


def save(fig: Figure, path: Path, *, tight: bool = True) -> Path:
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=DPI, bbox_inches="tight")  # the legends below the axes too
    return path


def legend_below(ax: Axes, **kwargs: Any) -> None:
    """A legend under the axes, outside the plotting area, so it never hides a point."""
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False, fontsize=7, **kwargs)


def epoch_x(epochs: Sequence[int]) -> list[float]:
    return [max(float(e), EPOCH_ZERO_AT) for e in epochs]


def trial_styles(
    trials: Sequence[str], groups: Mapping[str, str]
) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Each trial's colour and marker/dashes: one colour per trial, or per group (a
    family) when there are several groups, its trials then told apart by marker."""
    families = list(dict.fromkeys(groups.get(t, "") for t in trials))
    by_group = len(families) > 1
    palette = colours(len(families) if by_group else len(trials))
    seen: dict[str, int] = {}
    styles = {}
    for k, trial in enumerate(trials):
        group = groups.get(trial, "")
        index = seen[group] = seen.get(group, -1) + 1
        k_style = index if by_group else k
        colour = palette[families.index(group)] if by_group else palette[k]
        # trials whose curves coincide stay told apart: each its own marker and dashes
        styles[trial] = (
            colour,
            {
                "marker": MARKERS[k_style % len(MARKERS)],
                "linestyle": DASHES[k_style % len(DASHES)],
            },
        )
    return styles


def colours(count: int) -> list[tuple[float, float, float, float]]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if count <= 10 else "viridis"]
    return [cmap(i if count <= 10 else i / max(count - 1, 1)) for i in range(count)]
