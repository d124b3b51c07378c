"""The typed configuration of a training run: one frozen config per concern, composed.
One concern over 400 lines: every field a run has, declared once (see the end).

``ModelConfig`` (the caption and image encoders), ``LossConfig`` (the objective),
``OptimConfig`` (the schedule, clipping, batches, snapshots), ``EvalConfig`` (what is
evaluated, and how) and ``RunConfig`` (seed, device, precision, threads, engine) each own
their fields: a field is one ``setting`` that holds its default, its meaning (the help of
every command line), its bounds (checked when a config is built) and whether the members
of a fused group may differ in it; the defaults are the paper's Flickr8k setting
(docs/protocols.md sections 1-3). A new hyperparameter is one field, its use, and its range
in a search space. ``TrainConfig`` is all five at once: it inherits every field (the names
are unique across the concerns, so a run's config is one flat mapping at the boundaries:
Tune, a CLI, MLflow's parameters and a checkpoint) and adds the rules that span two
concerns. A component takes only its concern (``GroundedEncoder(ModelConfig)``,
``make_loss(LossConfig)``), so the type checker keeps it from reading the rest; a
``TrainConfig`` is each of them.

Choices are ``Literal`` types (``CHOICES`` is read off them). Each config validates itself
when it is built; ``from_dict`` is the boundary where a flat dict becomes a config: it
rejects unknown keys and invalid values, naming the key, the value and what is allowed (a
``ConfigError``, whose ``field`` a CLI turns into its option's name). ``encoder`` picks
the caption encoder family; a field that only some families have (``APPLIES_TO``) must
keep its default for the others, and is refused naming both ("pooling: does not apply to
encoder word_bow").

This module is longer than the others (about 500 lines) because its concern is one: every
field a run has, declared once with its default, help and bounds, the choices the fields
take and which family has which, as nanoGPT keeps all its defaults in one place. How a
field's declaration is checked and converted is ``trainables._config_fields``.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from trainables._config_fields import INT_LIMIT, ConfigError, ConfigPart

__all__ = [
    "APPLIES_TO",
    "ATTENTION_ENCODERS",
    "CHOICES",
    "CPU_SIZED",
    "DEVICE_FORMS",
    "ENGINES",
    "INT_LIMIT",
    "NEGATIVES",
    "POOLINGS",
    "PRECISIONS",
    "RECURRENCES",
    "REDUCTIONS",
    "RNN_ENCODERS",
    "RNN_TYPES",
    "SHORT_CYCLES",
    "SIZE_FIELDS",
    "SMOKE",
    "STSB_ENCODINGS",
    "WORD_ENCODERS",
    "BowPooling",
    "ConfigError",
    "Encoder",
    "Engine",
    "EvalConfig",
    "LossConfig",
    "LossKind",
    "ModelConfig",
    "Negatives",
    "OptimConfig",
    "Pairing",
    "Pooling",
    "Precision",
    "Recurrence",
    "Reduction",
    "RnnType",
    "RunConfig",
    "StsbEncoding",
    "TrainConfig",
    "WordVectorsUpdate",
    "applicable",
    "check_device",
    "inherited",
    "pinned",
    "setting",
]

# Run sizes a search sets: ``CPU_SIZED`` for a machine without a GPU, so that the default
# search finishes in minutes on 2 cores (the paper's n=1024 takes hours there;
# ``--full-size`` keeps the paper's), and ``SMOKE`` for a smoke test. They live here, beside
# the config they set, so that the benchmarks use them without importing the search.
# The learning-rate cycle shrinks with the epochs (the paper: 32 epochs, 4-epoch cycles), so
# that every epoch ends at the cycle's minimum with a snapshot, and ASHA, which compares
# trials at cycle ends, can stop trials after the first epoch.
SHORT_CYCLES: dict[str, Any] = {"cycle_epochs": 1, "snapshot_interval": 1}
# At n = 32 the paper's lr_max (1e-3, for n = 1,024) is far too timid on the default world
# (BENCHMARKS.md, "A default run worth showing", has the measured comparison). The test
# battery runs at the last epoch only: at this size it costs several times an epoch's dev
# evaluation (BENCHMARKS.md, "Honest objectives").
CPU_SIZED: dict[str, Any] = {
    "hidden_size": 32,
    "batch_size": 64,
    "epochs": 4,
    "lr_max": 0.016,
    "semantic_every": 4,
    **SHORT_CYCLES,
}
SMOKE: dict[str, Any] = {"hidden_size": 8, "batch_size": 8, "epochs": 2, **SHORT_CYCLES}


# -- the choices: each a Literal type, its values read off it --

# the caption encoder families (README "Encoder families"): the paper's character model,
# the authors' word-level model (their flickr_words scripts), VETE's bag of words and
# stacked RNN, GroundSent's Cap2Img
Encoder = Literal["char_rnn", "word_rnn", "word_bow", "vete_rnn", "cap2img"]
RnnType = Literal["gru", "lstm"]
Pooling = Literal["attention", "max"]
LossKind = Literal["hinge", "pearson"]
Reduction = Literal["sum", "mean"]
Negatives = Literal["all", "hardest"]
Precision = Literal["fp32", "bf16"]
StsbEncoding = Literal["senteval", "rescaled"]
Pairing = Literal["image", "caption"]
BowPooling = Literal["sum", "mean"]
WordVectorsUpdate = Literal["learned", "frozen_map"]
Engine = Literal["auto", "fused", "sequential"]
Recurrence = Literal["compiled", "python"]

RNN_TYPES: tuple[RnnType, ...] = typing.get_args(RnnType)
POOLINGS: tuple[Pooling, ...] = typing.get_args(Pooling)
REDUCTIONS: tuple[Reduction, ...] = typing.get_args(Reduction)
NEGATIVES: tuple[Negatives, ...] = typing.get_args(Negatives)
PRECISIONS: tuple[Precision, ...] = typing.get_args(Precision)
STSB_ENCODINGS: tuple[StsbEncoding, ...] = typing.get_args(StsbEncoding)
ENGINES: tuple[Engine, ...] = typing.get_args(Engine)
RECURRENCES: tuple[Recurrence, ...] = typing.get_args(Recurrence)

ATTENTION_ENCODERS: tuple[Encoder, ...] = ("char_rnn", "word_rnn")  # BiRNN + attention or max
RNN_ENCODERS: tuple[Encoder, ...] = ("char_rnn", "word_rnn", "vete_rnn", "cap2img")
WORD_ENCODERS: tuple[Encoder, ...] = ("word_rnn", "word_bow", "vete_rnn", "cap2img")
# the fields that only some encoder families have; set to anything but its default for
# another family, a field is refused, naming both. The table is the one statement of
# which family has what: the model checks its own fields against it, the training config
# the others (a loss weight, a clip), ``applicable`` and ``inherited`` read it for a search.
APPLIES_TO: dict[str, tuple[Encoder, ...]] = {
    "hidden_size": RNN_ENCODERS,
    "rnn_type": RNN_ENCODERS,
    "pooling": ATTENTION_ENCODERS,
    "attention_hidden": ATTENTION_ENCODERS,
    "attention_heads": ATTENTION_ENCODERS,
    "attention_penalty": ATTENTION_ENCODERS,
    "rnn_layers": ("vete_rnn",),
    # cap2img's image side is the CNN feature itself: no parameters to clip
    "clip_image": ("char_rnn", "word_rnn", "word_bow", "vete_rnn"),
    "dropout": ("cap2img",),
    "char_embedding_dim": ("char_rnn",),
    "word_embedding_dim": WORD_ENCODERS,
    "vocab_min_count": WORD_ENCODERS,
    "vocab_max_size": WORD_ENCODERS,
    "word_vectors": WORD_ENCODERS,
    "word_vectors_update": WORD_ENCODERS,
    "bow_pooling": ("word_bow",),
}
# A model's size and its learning rate go together: a run-level lr_max (the CPU-sized
# one) was chosen for the run's size, so a trial that sets its own size takes its own
# lr_max, or the paper's (``inherited``, ``pinned``).
SIZE_FIELDS = ("hidden_size",)
DEVICE_FORMS = "auto, cpu, cuda or cuda:N (N from 0 to 127)"
# torch starts this many OpenMP threads at its next parallel operation: 1000000 crashed
# the process (a segmentation fault); the limit is far above any machine's cores
MAX_THREADS = 1024
# torch keeps a device index in 8 signed bits: cuda:128 would silently become cuda:-128
_DEVICE = re.compile(r"auto|cpu|cuda(?::(0|[1-9][0-9]{0,2}))?")
_MAX_DEVICE_INDEX = 127


def setting(
    default: Any,
    help: str,
    *,
    low: float | None = None,
    high: float | None = None,
    open_low: bool = False,
    why: str = "",
    member: bool = False,
) -> Any:
    """A config field: its default, what it means (the help of every command line that
    sets it), its bounds (``low``, ``high``: inclusive, ``open_low``: ``low`` excluded;
    checked when a config is built; ``why``: the reason for ``low``, said when a value is
    below it) and whether the members of one fused group may differ in it (``member``;
    everything else shapes the model or the run, and is shared)."""
    metadata = {"help": help, "low": low, "high": high, "open_low": open_low, "why": why,
                "member": member}  # fmt: skip
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class ModelConfig(ConfigPart):
    """The caption and image encoders (docs/protocols.md section 1; the other families:
    README "Encoder families")."""

    hidden_size: int = setting(
        1024, "n: RNN units per direction; both embeddings have 2n dimensions", low=1
    )
    rnn_type: RnnType = setting("gru", "the caption RNN")
    pooling: Pooling = setting("attention", "pooling over time: vectorial attention or max "
                               "(both masked)")  # fmt: skip
    char_embedding_dim: int = setting(20, "size of the learned character embedding", low=1)
    attention_hidden: int = setting(
        128, "hidden units of the vectorial attention (of each head)", low=1
    )
    encoder: Encoder = setting(
        "char_rnn",
        "the caption encoder family: char_rnn (the paper's), word_rnn (the same over words), "
        "word_bow (VETE: the normalised sum of word embeddings), vete_rnn (VETE: a stacked "
        "RNN's final state), cap2img (GroundSent: BiLSTM, max of the final states, projected "
        "into the image-feature space)",
    )
    attention_heads: int = setting(
        1, "attention heads, concatenated; the embeddings have 2n x heads dimensions", low=1
    )
    word_embedding_dim: int = setting(
        300, "word families: size of a word embedding (word_bow: also the embeddings' size; "
        "the authors' word GRU used 300, VETE 128)", low=1,
    )  # fmt: skip
    vocab_min_count: int = setting(
        5, "word families: how often a training caption must hold a word for the "
        "vocabulary (built from the training captions only); other words are unknown", low=1,
    )  # fmt: skip
    vocab_max_size: int = setting(0, "word families: most words kept, 0 = no cap", low=0)
    word_vectors: str = setting(
        "", "word families: a local GloVe-format text file initialising the embeddings of "
        "the words it has, '' = none (never downloaded)",
    )  # fmt: skip
    word_vectors_update: WordVectorsUpdate = setting(
        "learned", "word families: learned (the embeddings train) or frozen_map (the vectors "
        "stay fixed and a learned linear map follows, GroundSent's; needs word_vectors)",
    )  # fmt: skip
    bow_pooling: BowPooling = setting(
        "sum", "word_bow: sum or mean of the word embeddings, then L2 normalisation"
    )
    rnn_layers: int = setting(1, "vete_rnn: stacked RNN layers (one direction)", low=1)
    dropout: float = setting(0.0, "cap2img: dropout on the sentence encoding (GroundSent: 0.5)")

    def _rules(self) -> None:
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError("dropout", f"got {self.dropout!r}, expected a number in [0, 1)")
        _check_applies(self)
        if self.pooling == "max" and self.attention_heads != 1:
            raise ConfigError(
                "attention_heads", "does not apply to pooling max (only to attention)"
            )
        if self.word_vectors != self.word_vectors.strip() or "\n" in self.word_vectors:
            raise ConfigError(
                "word_vectors", f"got {self.word_vectors!r}, expected a file path or '' (none)"
            )
        if self.word_vectors_update == "frozen_map" and not self.word_vectors:
            raise ConfigError(
                "word_vectors_update",
                "frozen_map keeps pretrained vectors fixed: set word_vectors (a GloVe-format file)",
            )

    @property
    def embedding_dim(self) -> int:
        """The sentence embedding's size: 2n per attention head for the attention
        families, the word embedding size for word_bow, n for vete_rnn and cap2img. Both
        encoders' output (the joint space) has this size too, except cap2img's, which is
        the image feature's (``GroundedEncoder.joint_dim``)."""
        if self.encoder == "word_bow":
            return self.word_embedding_dim
        if self.encoder in ("vete_rnn", "cap2img"):
            return self.hidden_size
        return 2 * self.hidden_size * self.attention_heads


@dataclass(frozen=True)
class LossConfig(ConfigPart):
    """The objective (docs/protocols.md section 2): what a caption is matched with, and
    how a batch's similarities become a loss."""

    pairing: Pairing = setting(
        "image", "what a caption is matched with: its image (grounded), or another caption "
        "of the same image and no image (the text-only control, GroundSent's Cap2Cap)",
    )  # fmt: skip
    loss: LossKind = setting(
        "hinge", "hinge: bidirectional with in-batch negatives; pearson: VETE's"
    )
    margin: float = setting(
        0.2, "hinge margin alpha (the paper's best: 0.2, stable 0.15-0.25)", low=0.0,
        member=True,
    )  # fmt: skip
    reduction: Reduction = setting(
        "sum", "hinge: summed (the paper's formula) or averaged over the batch (/ B^2, the "
        "authors')", member=True,
    )  # fmt: skip
    negatives: Negatives = setting(
        "all", "hinge: every in-batch negative, or the hardest per query (VSE++)", member=True
    )
    attention_penalty: float = setting(
        0.0, "weight of the authors' attention diversity penalty (more than 1 head), 0 = off",
        low=0.0, member=True,
    )  # fmt: skip


@dataclass(frozen=True)
class OptimConfig(ConfigPart):
    """The optimisation (docs/protocols.md section 3): the cyclic learning rate, gradient
    clipping, batches and epochs, and the snapshots the ensemble is made of."""

    lr_min: float = setting(
        1e-6, "lower bound of the cyclic cosine learning rate", low=0.0, open_low=True,
        member=True,
    )  # fmt: skip
    lr_max: float = setting(
        1e-3, "upper bound of the cyclic cosine learning rate (the paper: 1e-3 Flickr8k, 1e-4 "
        "MSCOCO)", low=0.0, open_low=True, member=True,
    )  # fmt: skip
    cycle_epochs: int = setting(
        4, "epochs per learning-rate cycle (minima at epochs 0, 4, 8, ...)", low=1, member=True
    )
    clip_image: float = setting(
        0.0025, "gradient-norm clip of the image encoder, 0 = off", low=0.0, member=True
    )
    clip_caption: float = setting(
        0.05, "gradient-norm clip of the caption encoder, 0 = off", low=0.0, member=True
    )
    batch_size: int = setting(
        32, "image-caption pairs per minibatch (no image twice in a batch)", low=2,
        why="in-batch negatives need a second pair",
    )  # fmt: skip
    epochs: int = setting(
        32, "training epochs, each five passes over the training images (epoch 0 is the "
        "untrained model, evaluated)", low=0, member=True,
    )  # fmt: skip
    snapshot_interval: int = setting(
        4, "keep a snapshot at the end of every this-many epochs", low=1, member=True
    )
    ensemble_size: int = setting(
        2, "snapshots with the best dev R@10 mean summed into the ensemble", low=1, member=True
    )

    def _rules(self) -> None:
        if self.lr_min > self.lr_max:
            raise ConfigError(
                "lr_min",
                f"lr_min ({self.lr_min}) must not exceed lr_max ({self.lr_max})",
                whole=True,
            )


@dataclass(frozen=True)
class EvalConfig(ConfigPart):
    """What is evaluated when, and how (docs/protocols.md sections 4-5)."""

    semantic_every: int = setting(
        1, "the test battery every this-many epochs and for the ensemble (the dev semantic "
        "score, which selects: every epoch); 0 = no semantic evaluation", low=0, member=True,
    )  # fmt: skip
    stsb_encoding: StsbEncoding = setting(
        "senteval", "STS-B's 0-5 scores in SentEval's classifier: as SentEval feeds them, or "
        "rescaled onto 1-5 first (trainables.relatedness)", member=True,
    )  # fmt: skip
    eval_batch_size: int = setting(
        0, "sentences encoded at once in evaluation; 0 = by device: 1024 on a GPU, 256 on a "
        "CPU (whose activations then stay in cache; BENCHMARKS.md)", low=0,
    )  # fmt: skip


@dataclass(frozen=True)
class RunConfig(ConfigPart):
    """Where and how a run computes: its seed, device, precision, CPU threads, and how a
    trial's models train together."""

    seed: int = setting(
        0, "seeds the initialisation and the batch order, 0 to 2**63 - 1", low=0, member=True
    )
    device: str = setting("auto", DEVICE_FORMS)
    precision: Precision = setting(
        "fp32", "bf16: autocast (on a GPU; on the CPU the recurrence's own products in "
        "bfloat16 with float32 state; its speed and its cost in quality: BENCHMARKS.md)",
    )  # fmt: skip
    threads: int = setting(
        0, f"torch CPU threads, 0 = torch's default, at most {MAX_THREADS}", low=0,
        high=MAX_THREADS,
    )  # fmt: skip
    engine: Engine = setting(
        "auto", "how a trial's models (its configurations at their seeds) train: fused as one "
        "model, sequential one after the other, or auto: fused where it pays (two or more on "
        "a GPU, or several configurations in one trial); the same metrics either way",
    )  # fmt: skip
    recurrence: Recurrence = setting(
        "compiled", "the CPU training recurrence's per-step loop: compiled (C++, built once "
        "per machine by a search's driver, the train command or python -m "
        "trainables.cpp_loop; the Python loop, with a warning, where it is not built) or "
        "python (nothing compiled or looked up: a machine without a C++ compiler); the same "
        "equations either way",
    )  # fmt: skip

    def _rules(self) -> None:
        check_device(self.device)


_P = TypeVar("_P", bound=ConfigPart)


@dataclass(frozen=True)
class TrainConfig(RunConfig, EvalConfig, OptimConfig, LossConfig, ModelConfig):
    """A training run's whole config: every concern's fields (model, loss, optimisation,
    evaluation, run, in that order), each concern's checks, and the rules between two of
    them. ``evaluation`` and ``run`` give those parts alone (what the evaluation is made
    from)."""

    def _rules(self) -> None:
        """The rules that tie a loss weight or a clip to the encoder family."""
        if self.pooling == "max" and self.attention_penalty != 0.0:
            raise ConfigError(
                "attention_penalty", "does not apply to pooling max (only to attention)"
            )
        if self.attention_penalty > 0 and self.attention_heads == 1:
            raise ConfigError(
                "attention_penalty",
                f"got {self.attention_penalty}, but it does not apply to attention_heads 1 "
                "(the penalty keeps two or more heads apart)",
            )

    def _part(self, kind: type[_P]) -> _P:
        return kind(**{name: getattr(self, name) for name in kind.field_names()})

    @property
    def evaluation(self) -> EvalConfig:
        return self._part(EvalConfig)

    @property
    def run(self) -> RunConfig:
        return self._part(RunConfig)


_HINTS: dict[str, Any] = typing.get_type_hints(TrainConfig)
# what each field of fixed choices takes (the help of a CLI lists them)
CHOICES: dict[str, tuple[str, ...]] = {
    name: typing.get_args(hint)
    for name, hint in _HINTS.items()
    if typing.get_origin(hint) is Literal
}
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(TrainConfig)}


def _check_applies(config: ConfigPart) -> None:
    """A field that the config's encoder family does not have must keep its default: a
    search that sets it would otherwise seem to compare values that change nothing."""
    encoder = getattr(config, "encoder")  # noqa: B009 - only ModelConfig and its children
    for name, families in APPLIES_TO.items():
        if not hasattr(config, name) or encoder in families:
            continue
        if getattr(config, name) != _DEFAULTS[name]:
            raise ConfigError(
                name,
                f"does not apply to encoder {encoder} (only to {', '.join(families)}); "
                f"leave it at its default {_DEFAULTS[name]!r}",
            )


def applicable(values: Mapping[str, Any], encoder: str) -> dict[str, Any]:
    """``values`` (TrainConfig keys) without the fields the ``encoder`` family does not
    have: run-level settings (a CPU-sized ``hidden_size``) apply to the families that
    have them, in a search that draws the family."""
    return {
        name: value for name, value in values.items() if encoder in APPLIES_TO.get(name, (encoder,))
    }


def inherited(run_level: Mapping[str, Any], trial: Mapping[str, Any]) -> dict[str, Any]:
    """The run-level settings a trial that sets ``trial`` keeps: those its encoder family
    has (``applicable``), without the run's ``lr_max`` when the trial sets its own model
    size but no learning rate (``SIZE_FIELDS``: the run's rate was chosen for the run's
    size; the trial gets the paper's)."""
    encoder = trial.get("encoder", run_level.get("encoder", _DEFAULTS["encoder"]))
    kept = applicable(run_level, encoder)
    if any(name in trial for name in SIZE_FIELDS) and "lr_max" not in trial:
        kept.pop("lr_max", None)
    return kept


def pinned(preset: Mapping[str, Any]) -> dict[str, Any]:
    """``preset`` with its model size (where its family has one) and learning rate at the
    defaults where it leaves them: a run-level size or rate does not reach it."""
    encoder = preset.get("encoder", _DEFAULTS["encoder"])
    values = dict(preset)
    for name in SIZE_FIELDS:
        if encoder in APPLIES_TO[name]:
            values.setdefault(name, _DEFAULTS[name])
    values.setdefault("lr_max", _DEFAULTS["lr_max"])
    return values


def check_device(name: object) -> str:
    """``name`` if it is a device a run may ask for (``DEVICE_FORMS``), else a
    ``ConfigError``; whether that device exists here is checked when the run starts."""
    match = _DEVICE.fullmatch(name) if isinstance(name, str) else None
    if match is None or int(match.group(1) or 0) > _MAX_DEVICE_INDEX:
        raise ConfigError("device", f"got {name!r}, expected {DEVICE_FORMS}")
    return str(name)
