"""The two files a run leaves, and the only code that reads or writes them: one concern
over 400 lines (the files' format, written, read and checked in one place).

**Training state** (``TRAINER_FILE``: Tune's checkpoints, ``trainables.train --checkpoint``):
everything to continue a run exactly. **Ensemble** (``ENSEMBLE_FILE``: the MLflow artifact
of every trial): the weights that produced a trial's reported test metrics, and what is
needed to rebuild and use them. Both are ``torch.save`` dictionaries of tensors, strings
and numbers, loaded with ``weights_only=True`` (no pickled code is ever run):

====================  ==================================================================
key                   value
====================  ==================================================================
``format``            ``"grounded-training-state"`` or ``"grounded-ensemble"``
``schema_version``    ``SCHEMA_VERSION`` (files written before it existed read as 0)
``config``            ``dataclasses.asdict(TrainConfig)``: every field, flat (its
                      ``encoder`` names the family; files of versions 0 and 1 have none:
                      character models)
``alphabet``          the characters of a character model's input
                      (``trainables.model.ALPHABET``); ``""`` for a word model
``vocabulary``        (version 2) a word model's input, ``WordVocabulary.to_state()``:
                      ``{"kind": "words", "pattern", "lowercase", "words" (index 2 on),
                      "min_count", "max_size"}``; None for a character model (versions 0
                      and 1 have no such key: character models)
``snapshots``         ``[{"epoch", "score", "state"}]``: a model's ``state_dict`` per kept
                      snapshot, ``score`` its dev R@10 mean (NaN when not a snapshot)
training state only   ``model``, ``optimizer`` (state dicts), ``epoch``, ``step`` (trained
                      so far), ``history`` (the metrics of every reported epoch), ``rng``
                      (``{"torch", "cuda"}`` generator states)
ensemble only         ``weights``: where the snapshots come from, ``"snapshots"`` (the
                      best ``ensemble_size`` by dev R@10 mean), ``"final model"`` (no
                      snapshot was taken: the model the test metrics came from) or
                      ``"last evaluated model"`` (a trial stopped early or failed: the
                      model of its last evaluated epoch, never tested as an ensemble)
====================  ==================================================================

A file of another format, of a newer schema, truncated or not a torch file at all is a
``CheckpointError`` naming what it is and what was expected.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainables.config import TrainConfig
from trainables.families import tokenizer_from_entries
from trainables.model import ALPHABET, GroundedEncoder
from trainables.vocabulary import Tokenizer

__all__ = [
    "ENSEMBLE_FILE",
    "LAST_EVALUATED",
    "MAY_CHANGE_ON_RESUME",
    "SCHEMA_VERSION",
    "TRAINER_FILE",
    "CheckpointError",
    "EnsembleWeights",
    "check_resumable",
    "from_bytes",
    "load_ensemble",
    "load_training_state",
    "to_bytes",
    "training_state_header",
    "weight_mismatch",
]

SCHEMA_VERSION = 2  # 2: word models (the ``vocabulary`` key); 1: the format field
TRAINING_STATE = "grounded-training-state"
ENSEMBLE = "grounded-ensemble"
TRAINER_FILE = "trainer.pt"  # a Tune checkpoint directory's training state
ENSEMBLE_FILE = "ensemble.pt"  # a trial's MLflow artifact
_TRAINING_KEYS = ("config", "model", "optimizer", "epoch", "step", "history", "snapshots", "rng")
_ENSEMBLE_KEYS = ("config", "alphabet", "snapshots")
LAST_EVALUATED = "last evaluated model"  # EnsembleWeights.weights of an unfinished run


class CheckpointError(ValueError):
    """A file that is not a readable checkpoint or ensemble of this code's format."""


def to_bytes(state: Mapping[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(dict(state), buffer)
    return buffer.getvalue()


def from_bytes(
    data: bytes | str | os.PathLike[str],
    expected: str,
    *,
    map_location: str | torch.device = "cpu",
    what: str = "checkpoint",
) -> dict[str, Any]:
    """The dictionary in ``data`` (bytes or a file), checked to be of format ``expected``
    and of a schema this code reads; ``what`` names it in errors."""
    if not isinstance(data, bytes):
        try:
            data = Path(data).read_bytes()
        except OSError as err:
            raise CheckpointError(f"{what}: cannot be read ({err.strerror or err})") from None
    try:
        state = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises many kinds for a truncated or foreign file
        # torch's own message would advise weights_only=False, i.e. running the file's
        # pickled code: never pass that on
        raise CheckpointError(
            f"{what}: not a readable {expected} file: truncated, or not written by this "
            f"package ({type(err).__name__} while reading it with weights_only=True)"
        ) from None
    if not isinstance(state, dict):
        raise CheckpointError(
            f"{what}: expected a {expected} dictionary, got {type(state).__name__}"
        )
    return _checked(state, expected, what)


def _checked(state: dict[str, Any], expected: str, what: str) -> dict[str, Any]:
    found = state.get("format", expected)  # files from before the field: take their keys
    version = state.get("schema_version", 0)
    if found != expected:
        raise CheckpointError(f"{what}: a {found} file, expected a {expected} file")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise CheckpointError(
            f"{what}: {expected} schema version {version!r}; this code reads versions up to "
            f"{SCHEMA_VERSION} (written by a newer version of this package?)"
        )
    keys = _TRAINING_KEYS if expected == TRAINING_STATE else _ENSEMBLE_KEYS
    missing = [key for key in keys if key not in state]
    if missing:
        raise CheckpointError(f"{what}: a {expected} file without {', '.join(missing)}")
    problem = _values_problem(state, expected)
    if problem is not None:
        raise CheckpointError(f"{what}: not a {expected} file as this package writes it: {problem}")
    return state


def _values_problem(state: Mapping[str, Any], expected: str) -> str | None:
    """What in ``state`` is not of the type and shape this module writes (the field, what
    it should be), or None. Deeper checks (the config's fields, the optimiser's state,
    each tensor's shape against the model) are where they are read."""
    checks: dict[str, tuple[Callable[[Any], bool], str]] = {
        "config": (_is_dict, "an object of the run's settings"),
        "snapshots": (_is_snapshots, "a list of {epoch, score, state} snapshots"),
        "alphabet": (lambda v: isinstance(v, str), "the characters a model reads"),
        "vocabulary": (lambda v: v is None or _is_dict(v), "a word vocabulary, or none"),
    }
    if expected == TRAINING_STATE:
        checks |= {
            "model": (_is_weights, "a model's weights: names and tensors"),
            "optimizer": (_is_dict, "an optimiser's state"),
            "epoch": (_is_count, "an epoch: an integer from 0"),
            "step": (_is_count, "a step: an integer from 0"),
            "history": (
                lambda v: isinstance(v, list) and all(map(_is_dict, v)),
                "a list of reports",
            ),
            "rng": (_is_rng, "the random generators' states: {torch: a byte tensor, cuda: a list}"),
        }
    else:
        checks["weights"] = (
            lambda v: v in ("snapshots", "final model", LAST_EVALUATED),
            f"'snapshots', 'final model' or {LAST_EVALUATED!r}",
        )
    for key, (valid, said) in checks.items():
        if key in state and not valid(state[key]):
            return f"field {key!r} is {_kind(state[key])}, expected {said}"
    return None


def _is_dict(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) for k in value)


def _is_reports(value: Any) -> bool:
    return isinstance(value, list) and all(map(_is_dict, value))


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _is_weights(value: Any) -> bool:
    return _is_dict(value) and all(isinstance(t, torch.Tensor) for t in value.values())


def _is_snapshots(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(s, dict)
        and _is_count(s.get("epoch"))
        and type(s.get("score")) in (int, float)
        and _is_weights(s.get("state"))
        for s in value
    )


def _is_rng(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("torch"), torch.Tensor)
        and value["torch"].dtype == torch.uint8
        and value["torch"].dim() == 1
        and isinstance(value.get("cuda"), list)
        and all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for t in value["cuda"])
    )


def _kind(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, bool | int | float) or value is None:
        return repr(value)
    if isinstance(value, str):
        return f"the text {value[:30]!r}" + ("..." if len(value) > 30 else "")
    return (
        f"a {type(value).__name__} of {len(value)}"
        if hasattr(value, "__len__")
        else type(value).__name__
    )


def training_state_header() -> dict[str, Any]:
    """The keys a training state starts with (the Trainer adds the rest)."""
    return {"format": TRAINING_STATE, "schema_version": SCHEMA_VERSION}


def load_training_state(
    data: bytes | str | os.PathLike[str], device: str | torch.device = "cpu", what: str = ""
) -> dict[str, Any]:
    """A training state written by ``Trainer.save_checkpoint``, tensors on ``device``
    but for the random generators' states, which stay on the CPU: torch's
    ``set_rng_state`` and ``cuda.set_rng_state_all`` take only CPU byte tensors (a
    checkpoint resumed on a GPU failed on them)."""
    state = from_bytes(data, TRAINING_STATE, map_location="cpu", what=what or "checkpoint")
    return {key: value if key == "rng" else _to(value, device) for key, value in state.items()}


def _to(value: Any, device: str | torch.device) -> Any:
    """``value`` with every tensor in it (in dicts, lists and tuples) on ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {key: _to(item, device) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_to(item, device) for item in value)
    return value


@dataclass(frozen=True, eq=False)
class EnsembleWeights:
    """An ensemble file in memory: the snapshots' weights and what rebuilds them."""

    config: TrainConfig
    alphabet: str  # a character model's input ("" for a word model)
    snapshots: list[dict[str, Any]]  # {"epoch", "score", "state"}, best first
    weights: str = "snapshots"  # "snapshots" or "final model" (see the module docstring)
    vocabulary: dict[str, Any] | None = None  # a word model's input (WordVocabulary state)
    source: str = ""  # the file it was read from, for errors ("": made in memory)

    @classmethod
    def from_training_state(cls, state: Mapping[str, Any]) -> EnsembleWeights:
        """The ensemble a run's test metrics came from: its kept snapshots, or the final
        model when it took none (``Trainer.ensemble_metrics``)."""
        config = TrainConfig.from_dict(state["config"])
        alphabet, vocabulary = str(state.get("alphabet", ALPHABET)), state.get("vocabulary")
        if state["snapshots"]:
            return cls(config, alphabet, list(state["snapshots"]), vocabulary=vocabulary)
        final = {"epoch": int(state["epoch"]), "score": math.nan, "state": state["model"]}
        return cls(config, alphabet, [final], weights="final model", vocabulary=vocabulary)

    @classmethod
    def last_evaluated(cls, state: Mapping[str, Any]) -> EnsembleWeights:
        """A run that ended before its last epoch (stopped early, failed): the model of
        the last epoch it evaluated, marked ``"last evaluated model"``."""
        config = TrainConfig.from_dict(state["config"])
        alphabet, vocabulary = str(state.get("alphabet", ALPHABET)), state.get("vocabulary")
        last = {"epoch": int(state["epoch"]), "score": math.nan, "state": state["model"]}
        return cls(config, alphabet, [last], weights=LAST_EVALUATED, vocabulary=vocabulary)

    @property
    def complete(self) -> bool:
        """Whether these are the weights of a run that trained every epoch."""
        return self.weights != LAST_EVALUATED

    @property
    def epochs(self) -> list[int]:
        return [int(s["epoch"]) for s in self.snapshots]

    @property
    def feature_dim(self) -> int:
        """The CNN feature size the image encoder takes (read from its weights; cap2img's
        captions are projected into the feature space, so from that projection)."""
        state = self.snapshots[0]["state"]
        for name, axis in (("image_encoder.linear.weight", 1),
                           ("caption_encoder.projection.weight", 0)):  # fmt: skip
            weight = state.get(name)
            if isinstance(weight, torch.Tensor) and weight.dim() == 2:
                return int(weight.shape[axis])
        raise CheckpointError(
            f"{self.source or 'the ensemble'}: snapshot 0's weights have neither "
            "image_encoder.linear.weight nor caption_encoder.projection.weight (a matrix)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": ENSEMBLE,
            "schema_version": SCHEMA_VERSION,
            "config": self.config.to_dict(),
            "alphabet": self.alphabet,
            "vocabulary": self.vocabulary,
            "snapshots": self.snapshots,
            "weights": self.weights,
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        Path(path).write_bytes(to_bytes(self.to_dict()))
        return Path(path)

    def tokenizer(self) -> Tokenizer:
        """The models' input: ``CharEncoding`` of the alphabet, or the word vocabulary;
        ``CheckpointError`` when the file lacks what its family needs."""
        try:
            return tokenizer_from_entries(
                self.config, {"alphabet": self.alphabet, "vocabulary": self.vocabulary}
            )
        except ValueError as err:
            raise CheckpointError(str(err)) from None

    def models(self, device: str | torch.device = "cpu") -> list[GroundedEncoder]:
        """One evaluation-mode model per snapshot, on ``device``, sharing one tokenizer."""
        built = []
        tokenizer = self.tokenizer()
        for number, snapshot in enumerate(self.snapshots):
            model = GroundedEncoder(self.config, self.feature_dim, tokenizer)
            try:
                model.load_state_dict(snapshot["state"])
            except (RuntimeError, KeyError) as err:  # names or shapes of another model
                raise CheckpointError(
                    f"{self.source or 'the ensemble'}: snapshot {number}'s weights are not "
                    f"those of the model its config builds ({weight_mismatch(err)})"
                ) from None
            built.append(model.to(device).eval())
        return built


def weight_mismatch(err: BaseException) -> str:
    """torch's refusal of a state dict, in a line: its first reason."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return (lines[1] if len(lines) > 1 else lines[0] if lines else type(err).__name__)[:200]


def load_ensemble(data: bytes | str | os.PathLike[str], what: str = "") -> EnsembleWeights:
    """An ensemble file (``ENSEMBLE_FILE``), checked; tensors on the CPU."""
    what = what or (str(data) if not isinstance(data, bytes) else "ensemble")
    state = from_bytes(data, ENSEMBLE, what=what)
    if not state["snapshots"]:
        raise CheckpointError(f"{what}: an ensemble file with no weights in it")
    try:
        config = TrainConfig.from_dict(state["config"])
    except ValueError as err:
        raise CheckpointError(f"{what}: its config is not a TrainConfig ({err})") from None
    weights = EnsembleWeights(
        config,
        str(state["alphabet"]),
        list(state["snapshots"]),
        str(state.get("weights", "snapshots")),
        vocabulary=state.get("vocabulary"),
        source=what,
    )
    try:
        weights.tokenizer()  # the input its family needs is there
    except CheckpointError as err:
        raise CheckpointError(f"{what}: {err}") from None
    return weights


# what a resumed run may change: where it runs and how long (the rest must match exactly)
MAY_CHANGE_ON_RESUME = (
    "device", "epochs", "threads", "eval_batch_size", "engine", "recurrence",
)  # fmt: skip


def check_resumable(saved: Mapping[str, Any], config: TrainConfig, what: str = "") -> None:
    """A training state written with the config ``saved`` (its ``config`` dict) may go on
    as ``config``: only ``MAY_CHANGE_ON_RESUME`` may differ. Else a ``CheckpointError``
    naming ``what`` (default: the checkpoint) and every field that differs."""
    what = what or "the checkpoint"
    try:
        before = TrainConfig.from_dict(saved)
    except ValueError as err:
        raise CheckpointError(f"{what}: its config is not valid ({err})") from None
    changed = [
        f"{name} (checkpoint {getattr(before, name)!r}, now {getattr(config, name)!r})"
        for name in TrainConfig.field_names()
        if name not in MAY_CHANGE_ON_RESUME and getattr(before, name) != getattr(config, name)
    ]
    if changed:
        raise CheckpointError(
            f"{what}: was written with a different config: {'; '.join(changed)}; resume "
            f"with the same settings (only {', '.join(MAY_CHANGE_ON_RESUME)} may change)"
        )
