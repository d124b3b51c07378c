"""What a trial's run keeps besides its metrics: ``config.json`` (every TrainConfig
field), ``tradeoff.png`` (its dev curves, the paper's Fig. 4) and ``ensemble.pt`` (the
weights its reported test metrics came from, in ``trainables.checkpoint``'s format; for a
trial stopped early or failed, the model of its last evaluated epoch, marked so)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gridsearch.tracking._curves import draw_tradeoff, tradeoff_curve, trajectory_figure
from trainables import names
from trainables.checkpoint import ENSEMBLE_FILE, TRAINER_FILE, EnsembleWeights, load_training_state
from trainables.config import TrainConfig

__all__ = ["CURVE_KEYS", "curve_history", "trajectory_image", "write_trial_artifacts"]

CURVE_KEYS = (names.PRIMARY_RETRIEVAL, names.PRIMARY_SEMANTIC)


def curve_history(client: Any, run_id: str) -> dict[str, list[tuple[int, float]]]:
    """The run's ``(step, value)`` of each of ``CURVE_KEYS``, as MLflow holds them."""
    return {
        key: [(m.step, m.value) for m in client.get_metric_history(run_id, key)]
        for key in CURVE_KEYS
    }


def trajectory_image(
    history: Mapping[str, Sequence[tuple[int, float]]], colour: str
) -> np.ndarray | None:
    """The trial's ``_curves.trajectory_figure`` as an RGB array (what
    ``MlflowClient.log_image`` takes), or None when it has nothing to draw."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figure = trajectory_figure(tradeoff_curve(history, *CURVE_KEYS), colour)
    if figure is None:
        return None
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def write_trial_artifacts(
    folder: Path,
    trial_id: str,
    config: TrainConfig,
    history: Mapping[str, Sequence[tuple[int, float]]],
    checkpoint: Any,
    *,
    finished: bool,
) -> None:
    """Write the artifacts into ``folder``: ``history`` holds ``(epoch, value)`` of
    ``CURVE_KEYS``; ``checkpoint`` is the trial's last Tune checkpoint (or None): its
    ensemble when the trial ``finished``, else its last evaluated model."""
    (folder / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
    curve = tradeoff_curve(history, *CURVE_KEYS)
    if curve.epochs:
        draw_tradeoff(
            curve,
            folder / "tradeoff.png",
            f"{trial_id}: margin {config.margin:.3g}, n={config.hidden_size}, "
            f"{config.rnn_type}/{config.pooling}",
        )
    if checkpoint is None:
        return
    with checkpoint.as_directory() as source:
        state = load_training_state(Path(source) / TRAINER_FILE, what=f"{trial_id}'s checkpoint")
    build = EnsembleWeights.from_training_state if finished else EnsembleWeights.last_evaluated
    build(state).save(folder / ENSEMBLE_FILE)
