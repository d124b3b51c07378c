"""The one typed configuration of a training run, with every default in one place.

Each field's comment says what it is; the defaults are the paper's Flickr8k setting
(docs/protocols.md sections 1-3). ``TrainConfig.from_dict`` is the single boundary where a flat dict
(Tune's ``config``, a CLI, a JSON file) becomes a config: it rejects unknown keys and
invalid values, naming the key, the value and what is allowed (a ``ConfigError``, whose
``field`` a CLI turns into its option's name). ``encoder`` picks the caption encoder
family; a field that only some families have (``APPLIES_TO``) must keep its default for
the others, and is refused naming both ("pooling: does not apply to encoder word_bow").
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "APPLIES_TO",
    "ATTENTION_ENCODERS",
    "BOW_POOLINGS",
    "CHOICES",
    "CPU_SIZED",
    "DEVICE_FORMS",
    "ENCODERS",
    "INT_LIMIT",
    "LOSSES",
    "NEGATIVES",
    "PAIRINGS",
    "POOLINGS",
    "PRECISIONS",
    "REDUCTIONS",
    "RNN_ENCODERS",
    "RNN_TYPES",
    "SHORT_CYCLES",
    "SMOKE",
    "STSB_ENCODINGS",
    "WORD_ENCODERS",
    "WORD_VECTORS_UPDATES",
    "ConfigError",
    "TrainConfig",
    "applicable",
    "check_device",
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


# the caption encoder families (README "Encoder families"): the paper's character model,
# the authors' word-level model (their flickr_words scripts), VETE's bag of words and
# stacked RNN, GroundSent's Cap2Img
ENCODERS = ("char_rnn", "word_rnn", "word_bow", "vete_rnn", "cap2img")
ATTENTION_ENCODERS = ("char_rnn", "word_rnn")  # BiRNN + attention or max pooling
RNN_ENCODERS = ("char_rnn", "word_rnn", "vete_rnn", "cap2img")
WORD_ENCODERS = ("word_rnn", "word_bow", "vete_rnn", "cap2img")
RNN_TYPES = ("gru", "lstm")
POOLINGS = ("attention", "max")
LOSSES = ("hinge", "pearson")
REDUCTIONS = ("sum", "mean")
NEGATIVES = ("all", "hardest")
PRECISIONS = ("fp32", "bf16")
STSB_ENCODINGS = ("senteval", "rescaled")
PAIRINGS = ("image", "caption")
BOW_POOLINGS = ("sum", "mean")
WORD_VECTORS_UPDATES = ("learned", "frozen_map")
# what each field of fixed choices takes (the help of a CLI lists them)
CHOICES = {
    "encoder": ENCODERS,
    "rnn_type": RNN_TYPES,
    "pooling": POOLINGS,
    "loss": LOSSES,
    "reduction": REDUCTIONS,
    "negatives": NEGATIVES,
    "precision": PRECISIONS,
    "stsb_encoding": STSB_ENCODINGS,
    "bow_pooling": BOW_POOLINGS,
    "word_vectors_update": WORD_VECTORS_UPDATES,
    "pairing": PAIRINGS,
}
# the fields that only some encoder families have; set to anything but its default for
# another family, a field is refused, naming both (``TrainConfig.from_dict``)
APPLIES_TO: dict[str, tuple[str, ...]] = {
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
DEVICE_FORMS = "auto, cpu, cuda or cuda:N (N from 0 to 127)"
# every integer field is below 2**63, what a 64-bit signed integer holds: torch keeps
# sizes, steps and seeds in 64-bit integers (torch.manual_seed fails from 2**64 on)
INT_LIMIT = 2**63
# torch starts this many OpenMP threads at its next parallel operation: 1000000 crashed
# the process (a segmentation fault); the limit is far above any machine's cores
MAX_THREADS = 1024
# torch keeps a device index in 8 signed bits: cuda:128 would silently become cuda:-128
_DEVICE = re.compile(r"auto|cpu|cuda(?::(0|[1-9][0-9]{0,2}))?")
_MAX_DEVICE_INDEX = 127


class ConfigError(ValueError):
    """An invalid config value; ``field`` names the key (None for an unknown key)."""

    def __init__(self, field: str | None, message: str, *, whole: bool = False) -> None:
        """``message`` says what is wrong; it follows "``field``: " unless ``whole``
        (it names the field itself)."""
        super().__init__(f"{field}: {message}" if field and not whole else message)
        self.field = field
        self.detail = message


@dataclass(frozen=True)
class TrainConfig:
    # -- model (docs/protocols.md section 1; the other families: README "Encoder families") --
    hidden_size: int = 1024  # n: RNN units per direction; both embeddings have 2n dimensions
    rnn_type: str = "gru"  # "gru" or "lstm"
    pooling: str = "attention"  # "attention" (vectorial, masked) or "max" (masked)
    char_embedding_dim: int = 20  # size of the learned character embedding
    attention_hidden: int = 128  # hidden units of the vectorial attention (of each head)
    # the caption encoder: "char_rnn" (the paper's), "word_rnn" (the same over words),
    # "word_bow" (VETE: the normalised sum of word embeddings), "vete_rnn" (VETE: a
    # stacked RNN's final state), "cap2img" (GroundSent: BiLSTM, max of the final states,
    # projected into the image-feature space)
    encoder: str = "char_rnn"
    # attention heads, concatenated (the embeddings have 2n x heads dimensions); 1 = the paper
    attention_heads: int = 1
    # weight of the authors' attention diversity penalty in the loss (0 = off; > 1 head)
    attention_penalty: float = 0.0
    # word families: the size of a word embedding (word_bow: also both embeddings' size;
    # the authors' word GRU used 300, VETE 128)
    word_embedding_dim: int = 300
    # word families: the vocabulary, built from the training captions only (words seen at
    # least this often; 5 as the authors' dictionaries), at most vocab_max_size words
    # (0 = no cap); every other word is the unknown word
    vocab_min_count: int = 5
    vocab_max_size: int = 0
    # word families: a local GloVe-format text file initialising the embeddings of the
    # words it has ("" = every embedding learned from scratch); never downloaded
    word_vectors: str = ""
    # "learned": the embeddings train; "frozen_map": the vectors stay fixed and a learned
    # linear map follows them (GroundSent); needs word_vectors
    word_vectors_update: str = "learned"
    bow_pooling: str = "sum"  # word_bow: "sum" or "mean" of the word embeddings, then L2
    rnn_layers: int = 1  # vete_rnn: stacked RNN layers (one direction; the final state)
    dropout: float = 0.0  # cap2img: dropout on the sentence encoding (GroundSent: 0.5)
    # what a caption is matched with in training: "image" (grounded), or "caption" (the
    # text-only control: another caption of the same image, no image; GroundSent's Cap2Cap)
    pairing: str = "image"
    # -- loss (docs/protocols.md section 2) --
    loss: str = "hinge"  # "hinge" (bidirectional, in-batch negatives) or "pearson" (VETE)
    margin: float = 0.2  # hinge margin alpha; the paper's best is 0.2 (stable 0.15-0.25)
    reduction: str = "sum"  # "sum" (the paper's formula) or "mean" (/ B^2, the authors' code)
    negatives: str = "all"  # "all" in-batch negatives, or "hardest" per query (VSE++)
    # -- optimisation (docs/protocols.md section 3) --
    lr_min: float = 1e-6  # lower bound of the cyclic cosine learning rate
    lr_max: float = 1e-3  # upper bound (paper: 1e-3 Flickr8k, 1e-4 MSCOCO)
    cycle_epochs: int = 4  # one learning-rate cycle; minima at epochs 0, 4, 8, ...
    clip_image: float = 0.0025  # gradient-norm clip of the image encoder (0 = off)
    clip_caption: float = 0.05  # gradient-norm clip of the caption encoder (0 = off)
    batch_size: int = 32  # image-caption pairs per minibatch (no image twice in a batch)
    epochs: int = 32  # training epochs (each is five passes over the training images)
    # -- snapshots and ensemble (docs/protocols.md section 3) --
    snapshot_interval: int = 4  # keep a snapshot at the end of every this-many epochs
    ensemble_size: int = 2  # snapshots with the best dev R@10 mean summed into the ensemble
    # -- evaluation --
    # the test battery every this-many epochs and for the ensemble; the dev semantic
    # score (selection) every epoch; 0 = no semantic evaluation at all
    semantic_every: int = 1
    # STS-B's 0-5 scores in SentEval's classifier: "senteval" (as SentEval, the default)
    # or "rescaled" (mapped onto 1-5 first; see trainables.relatedness)
    stsb_encoding: str = "senteval"
    # sentences encoded at once during evaluation; 0 = by device: 1024 on a GPU, 256 on a
    # CPU (whose (256, T, 2n) activations stay in cache; BENCHMARKS.md has the timing)
    eval_batch_size: int = 0
    # -- run --
    seed: int = 0  # seeds the initialisation and the batch order (0 to 2**63 - 1)
    device: str = "auto"  # "auto" (cuda if available), "cpu", "cuda", "cuda:N" (N <= 127)
    # "fp32" or "bf16": autocast (on a GPU; on the CPU the recurrence's own products in
    # bfloat16 with float32 state; its speed and its cost in quality: BENCHMARKS.md)
    precision: str = "fp32"
    threads: int = 0  # torch CPU threads (0 = leave torch's default; at most MAX_THREADS)

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            _check_type(field.name, getattr(self, field.name), _KINDS[field.name])
        for name, allowed in CHOICES.items():
            _check_choice(name, getattr(self, name), allowed)
        for name in (
            "hidden_size",
            "char_embedding_dim",
            "attention_hidden",
            "attention_heads",
            "word_embedding_dim",
            "vocab_min_count",
            "rnn_layers",
            "cycle_epochs",
            "batch_size",
            "snapshot_interval",
            "ensemble_size",
        ):
            _check_int(name, getattr(self, name), low=1)
        for name in ("epochs", "semantic_every", "eval_batch_size", "seed", "vocab_max_size"):
            _check_int(name, getattr(self, name), low=0)
        _check_int("threads", self.threads, low=0, high=MAX_THREADS)
        for name in ("margin", "clip_image", "clip_caption", "attention_penalty"):
            _check_float(name, getattr(self, name), low=0.0)
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError("dropout", f"got {self.dropout!r}, expected a number in [0, 1)")
        for name in ("lr_min", "lr_max"):
            _check_float(name, getattr(self, name), low=0.0, open_low=True)
        if self.lr_min > self.lr_max:
            raise ConfigError(
                "lr_min",
                f"lr_min ({self.lr_min}) must not exceed lr_max ({self.lr_max})",
                whole=True,
            )
        if self.batch_size < 2:
            raise ConfigError(
                "batch_size",
                f"got {self.batch_size}, expected at least 2 (in-batch negatives need a "
                "second pair)",
            )
        check_device(self.device)
        _check_applies(self)

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

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrainConfig:
        """Build a config from a flat dict, converting numbers given as strings or as the
        other numeric type; unknown keys and invalid values raise ``ConfigError``."""
        unknown = sorted(set(values) - set(cls.field_names()))
        if unknown:
            raise ConfigError(
                None,
                f"unknown config key(s) {', '.join(map(repr, unknown))}; allowed: "
                f"{', '.join(cls.field_names())}",
            )
        return cls(**{name: _coerce(name, value, _KINDS[name]) for name, value in values.items()})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)


_KINDS: dict[str, type] = typing.get_type_hints(TrainConfig)
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(TrainConfig)}


def _check_applies(config: TrainConfig) -> None:
    """A field that the config's encoder family (or its pooling, or its single attention
    head) does not have must keep its default: a search that sets it would otherwise
    seem to compare values that change nothing."""
    for name, families in APPLIES_TO.items():
        if config.encoder not in families and getattr(config, name) != _DEFAULTS[name]:
            raise ConfigError(
                name,
                f"does not apply to encoder {config.encoder} (only to {', '.join(families)}); "
                f"leave it at its default {_DEFAULTS[name]!r}",
            )
    if config.pooling == "max":
        for name in ("attention_heads", "attention_penalty"):
            if getattr(config, name) != _DEFAULTS[name]:
                raise ConfigError(name, "does not apply to pooling max (only to attention)")
    if config.attention_penalty > 0 and config.attention_heads == 1:
        raise ConfigError(
            "attention_penalty",
            f"got {config.attention_penalty}, but it does not apply to attention_heads 1 "
            "(the penalty keeps two or more heads apart)",
        )
    if config.word_vectors != config.word_vectors.strip() or "\n" in config.word_vectors:
        raise ConfigError(
            "word_vectors", f"got {config.word_vectors!r}, expected a file path or '' (none)"
        )
    if config.word_vectors_update == "frozen_map" and not config.word_vectors:
        raise ConfigError(
            "word_vectors_update",
            "frozen_map keeps pretrained vectors fixed: set word_vectors (a GloVe-format file)",
        )


def applicable(values: Mapping[str, Any], encoder: str) -> dict[str, Any]:
    """``values`` (TrainConfig keys) without the fields the ``encoder`` family does not
    have: run-level settings (a CPU-sized ``hidden_size``) apply to the families that
    have them, in a search that draws the family."""
    return {
        name: value for name, value in values.items() if encoder in APPLIES_TO.get(name, (encoder,))
    }


def check_device(name: object) -> str:
    """``name`` if it is a device a run may ask for (``DEVICE_FORMS``), else a
    ``ConfigError``; whether that device exists here is checked when the run starts."""
    match = _DEVICE.fullmatch(name) if isinstance(name, str) else None
    if match is None or int(match.group(1) or 0) > _MAX_DEVICE_INDEX:
        raise ConfigError("device", f"got {name!r}, expected {DEVICE_FORMS}")
    return str(name)


def _coerce(name: str, value: Any, kind: type) -> Any:
    """``value`` as ``kind`` (int, float or str), accepting numbers written as strings
    (an integer string exactly, however long; "1e3" as 1000)."""
    try:
        if kind is int and not isinstance(value, bool):
            if isinstance(value, numbers.Integral):  # int, numpy's: exactly, however large
                return int(value)
            if isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9_]+\s*", value):
                return int(value)
            if float(value).is_integer():
                return int(float(value))
        if kind is float and not isinstance(value, bool):
            return float(value)
        if kind is str and isinstance(value, str):
            return value
    except (TypeError, ValueError, OverflowError):
        pass
    raise ConfigError(name, f"got {value!r} ({type(value).__name__}), expected {kind.__name__}")


def _check_type(name: str, value: Any, kind: type) -> None:
    """Fields set directly (not through ``from_dict``) must already be of their kind;
    an int is a float too, a bool is neither."""
    accepted = (int, float) if kind is float else (kind,)
    if isinstance(value, bool) or not isinstance(value, accepted):
        raise ConfigError(name, f"got {value!r} ({type(value).__name__}), expected {kind.__name__}")


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(name, f"got {value!r}, expected one of {', '.join(allowed)}")


def _check_int(name: str, value: int, *, low: int, high: int = INT_LIMIT - 1) -> None:
    if not low <= value <= high:
        shown = "2**63 - 1" if high == INT_LIMIT - 1 else str(high)
        raise ConfigError(name, f"got {value!r}, expected an integer from {low} to {shown}")


def _check_float(name: str, value: float, *, low: float, open_low: bool = False) -> None:
    bad = (value <= low) if open_low else (value < low)
    if bad or not math.isfinite(value):
        relation = ">" if open_low else ">="
        raise ConfigError(name, f"got {value!r}, expected a finite number {relation} {low}")
