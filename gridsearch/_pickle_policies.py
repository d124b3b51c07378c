"""What the pickles of a runs directory may import and call (``gridsearch._pickles``'
``Policy``): ``STATE``, Tune's, Optuna's, MLflow's and this package's state; ``TORCH``,
torch's files (checkpoints, the ensemble)."""

from __future__ import annotations

from gridsearch._pickles import Policy

__all__ = ["STATE", "TORCH"]

_NUMPY = frozenset(
    f"{prefix}.{name}"
    for prefix in ("numpy._core", "numpy.core")
    for name in ("multiarray._reconstruct", "multiarray.scalar", "numeric._frombuffer")
) | frozenset(
    {
        "numpy.dtype",
        "numpy.random._pickle.__bit_generator_ctor",
        "numpy.random._pickle.__randomstate_ctor",
        "numpy.random._pickle.__generator_ctor",
    }
)
_CONTAINERS = frozenset(
    {
        "builtins.set",
        "builtins.frozenset",
        "builtins.bytearray",
        "builtins.complex",
        "collections.OrderedDict",
        "collections.deque",
        "collections.defaultdict",
        "datetime.datetime",
        "datetime.date",
        "datetime.timedelta",
        "datetime.timezone",
        "pathlib.Path",
        "pathlib.PosixPath",
        "pathlib.PurePosixPath",
        "uuid.UUID",
    }
)

# Tune's, Optuna's, MLflow's and this package's state (tuner.pkl, the searcher's state,
# the search generator's, the trials' fields in the experiment state, params.pkl):
# what searches of every kind (grid, TPE, GP, both objectives, ASHA, --fuse, seeds,
# space files) were found to hold.
STATE = Policy(
    calls=_CONTAINERS
    | _NUMPY
    | frozenset({"pyarrow._fs.FileSystem._from_uri"}),  # Tune's storage filesystem, by URI
    references=frozenset(
        {
            "numpy.ndarray",
            "numpy.random._mt19937.MT19937",
            "numpy.random._pcg64.PCG64",
            "numpy.random.bit_generator.SeedSequence",
            "time.monotonic",
            "time.time",
            "ray.train._internal.storage._upload_to_fs_path",
            "gridsearch.tracking._callback.TrialTracker._reachable",
        }
    ),
    classes_under=(
        "optuna.",
        "ray.tune.",
        "ray.train.",
        "ray.air.",
        "mlflow.",
        "gridsearch.",
        "trainables.",
        "storage.",
    ),
    # a space's define-by-run function, Optuna's TPE weights and gamma functions
    references_under=("gridsearch.spaces.", "gridsearch._space_file.", "optuna.samplers."),
    builtin_types=frozenset({"MethodType"}),
)

_TORCH_STORAGES = (
    "Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool",
    "ComplexFloat", "ComplexDouble", "Untyped",
)  # fmt: skip

# torch.save's data.pkl inside a checkpoint or ensemble: tensors and their storages, in
# dictionaries and lists (what torch.load(weights_only=True) reads).
TORCH = Policy(
    calls=frozenset(
        {
            "collections.OrderedDict",
            "builtins.set",
            "_codecs.encode",  # bytes, in protocol 2 (torch.save's): a text and its codec
            "torch._utils._rebuild_tensor_v2",
            "torch._utils._rebuild_parameter",
            "torch.Size",
            "torch.device",
        }
    ),
    references=frozenset(f"torch.{kind}Storage" for kind in _TORCH_STORAGES)
    | frozenset({"torch.float32", "torch.float16", "torch.bfloat16", "torch.int64"}),
    persistent_ids=True,
)
