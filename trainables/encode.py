"""Embed sentences with a trained model: ``SentenceEncoder`` as a command.

    python -m trainables.encode --model models:/margin_sweep@best-retrieval \\
        --input sentences.txt --output embeddings.npy
    echo "A small red circle." | python -m trainables.encode --model runs/ensemble.pt

``--model`` is anything ``SentenceEncoder.load`` takes (a checkpoint or ensemble file, a
Tune checkpoint folder, a run id, trial id or run name, a ``models:/`` or ``runs:/`` URI).
Input: a text file of one sentence per line (UTF-8), a Parquet file (the ``--column``
string column), or ``-`` (stdin, the default). Output by its suffix: ``.npy`` (float32,
one row per sentence), ``.parquet`` (columns ``sentence`` and ``embedding``), or text
(``-``, stdout, the default: one line of space-separated numbers per sentence). A file
output is written whole or not at all. Progress goes to stderr on long inputs.

Exit status: 0, or 2 with one ``error:`` line naming the option or file.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from storage.cli import HelpFormatter, OneLineParser, one_line
from trainables.checkpoint import CheckpointError
from trainables.embedding import SPACES
from trainables.encoder import MAX_CHARS, Progress, SentenceEncoder

__all__ = ["MAX_CHARS", "main"]

_PROGRESS_FROM = 5_000  # sentences: shorter inputs finish before a bar is worth drawing


class _BadInput(Exception):
    """An input or output that cannot be used, named."""


def _parser() -> OneLineParser:
    p = OneLineParser(
        prog="python -m trainables.encode",
        formatter_class=HelpFormatter,
        description="Embed sentences with a trained model (one vector per sentence).",
        epilog="Exit status: 0, or 2 with one 'error:' line naming the option or file.",
    )
    p.add_argument(
        "--model",
        required=True,
        metavar="MODEL",
        help="checkpoint/ensemble file, Tune checkpoint folder, run or trial id, run name, "
        "models:/NAME@ALIAS or runs:/ URI; required",
    )
    p.add_argument(
        "--input",
        default="-",
        metavar="FILE",
        help="sentences: .txt (UTF-8, one per line), .parquet, or - for stdin (default: -)",
    )
    p.add_argument(
        "--column",
        default="sentence",
        metavar="NAME",
        help="the string column of a Parquet input (default: sentence)",
    )
    p.add_argument(
        "--output",
        default="-",
        metavar="FILE",
        help="embeddings by suffix: .npy (float32), .parquet (sentence, embedding), or - for "
        "text on stdout; a file is written whole or not at all (default: -)",
    )
    p.add_argument(
        "--tracking-uri",
        default=None,
        metavar="URI",
        help="where run ids and models:/ URIs are looked up (default: the search's "
        "sqlite store, runs/mlflow.db under the working directory)",
    )
    p.add_argument(
        "--device",
        default="auto",
        help="auto (cuda if available), cpu, cuda or cuda:N (default: auto)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=0,
        metavar="N",
        help="sentences encoded at once; 0 = by device (default: 0)",
    )
    p.add_argument(
        "--no-normalize",
        action="store_true",
        help="keep the ensemble's summed vectors instead of unit length",
    )
    p.add_argument(
        "--space",
        choices=SPACES,
        default="sentence",
        help="sentence embeddings, or the joint ones compared with images (they differ "
        "only for cap2img, whose captions are projected into the image-feature space) "
        "(default: sentence)",
    )
    p.add_argument(
        "--progress",
        choices=("auto", "always", "never"),
        default="auto",
        help=f"a progress line on stderr; auto: on a terminal, from "
        f"{_PROGRESS_FROM:,} sentences (default: auto)",
    )
    return p  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.batch_size < 0:
            raise _BadInput(f"--batch-size: expected 0 or more, got {args.batch_size}")
        sentences = _read(args.input, args.column)
        _check_output(args.output)
        encoder = SentenceEncoder.load(
            args.model, tracking_uri=args.tracking_uri, device=args.device
        )
        vectors = encoder.encode(
            sentences,
            batch_size=args.batch_size,
            normalize=not args.no_normalize,
            space=args.space,
            progress=_progress(args.progress, len(sentences)),
        )
        _write(args.output, sentences, vectors)
    except (_BadInput, CheckpointError, ValueError) as err:
        return _fail(str(err))
    except BrokenPipeError:  # the reader of stdout went away (`... | head`)
        return 141
    except OSError as err:  # writing the output: the message names the file
        return _fail(f"--output {err.filename or args.output}: {err.strerror or err}")
    return 0


def _fail(message: str) -> int:
    print(f"error: {one_line(message)}", file=sys.stderr)
    return 2


def _read(source: str, column: str) -> list[str]:
    if source.endswith(".parquet"):
        return _read_parquet(source, column)
    what = "--input - (stdin)" if source == "-" else f"--input {source}"
    try:
        if source == "-":
            text = sys.stdin.buffer.read()
        else:
            if not Path(source).is_file():
                raise _BadInput(f"{what}: not a regular file (or missing)")
            text = Path(source).read_bytes()
        lines = text.decode("utf-8").splitlines()
    except UnicodeDecodeError as err:
        line = text[: err.start].count(b"\n") + 1
        raise _BadInput(f"{what}: line {line} is not UTF-8 text") from None
    except OSError as err:
        raise _BadInput(f"{what}: cannot be read ({err.strerror or err})") from None
    return _checked(lines, what)


def _read_parquet(source: str, column: str) -> list[str]:
    what = f"--input {source}"
    if not Path(source).is_file():
        raise _BadInput(f"{what}: not a regular file (or missing)")
    try:
        if column not in pq.read_schema(source).names:
            raise _BadInput(f"{what}: no column {column!r} (choose one with --column)")
        table = pq.read_table(source, columns=[column])
    except (OSError, pa.ArrowException) as err:
        raise _BadInput(f"{what}: not a readable Parquet file ({one_line(err)})") from None
    values = table.column(column)
    if not pa.types.is_string(values.type) and not pa.types.is_large_string(values.type):
        raise _BadInput(f"{what}: column {column!r} holds {values.type}, expected strings")
    if values.null_count:
        raise _BadInput(f"{what}: column {column!r} has {values.null_count} missing values")
    return _checked(values.to_pylist(), what)


def _checked(sentences: list[str], what: str) -> list[str]:
    for number, sentence in enumerate(sentences, 1):
        if len(sentence) > MAX_CHARS:
            raise _BadInput(
                f"{what}: sentence {number} has {len(sentence):,} characters; at most "
                f"{MAX_CHARS:,} are encoded"
            )
    return sentences


def _check_output(target: str) -> None:
    if target == "-":
        return
    path = Path(target)
    if path.is_dir():
        raise _BadInput(f"--output {target}: is a directory, expected a file name")
    if path.suffix not in (".npy", ".parquet"):
        raise _BadInput(f"--output {target}: expected a .npy or .parquet file, or - (stdout)")
    if not path.parent.is_dir():
        raise _BadInput(f"--output {target}: the folder {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK):
        raise _BadInput(f"--output {target}: the folder {path.parent} is not writable")


def _write(target: str, sentences: list[str], vectors: np.ndarray) -> None:
    if target == "-":
        for line in _text_lines(vectors):
            sys.stdout.write(line)
        sys.stdout.flush()
        return
    path = Path(target)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as f:
        staging = Path(f.name)
    try:
        if path.suffix == ".npy":
            with staging.open("wb") as handle:
                np.save(handle, vectors)
        else:
            embedding = pa.FixedSizeListArray.from_arrays(
                pa.array(vectors.reshape(-1), pa.float32()), vectors.shape[1]
            )
            pq.write_table(pa.table({"sentence": sentences, "embedding": embedding}), staging)
        os.replace(staging, path)
    finally:
        staging.unlink(missing_ok=True)


def _text_lines(vectors: np.ndarray) -> Iterator[str]:
    for row in vectors:
        yield " ".join(f"{value:.7g}" for value in row) + "\n"


def _progress(mode: str, total: int) -> Progress | None:
    show = mode == "always" or (mode == "auto" and total >= _PROGRESS_FROM and sys.stderr.isatty())
    if not show:
        return None

    def report(done: int, total: int) -> None:
        width = 30
        filled = width * done // max(total, 1)
        end = "\n" if done >= total else ""
        bar = "#" * filled + "." * (width - filled)
        print(f"\rencoding [{bar}] {done:,}/{total:,}", end=end, file=sys.stderr, flush=True)

    return report


if __name__ == "__main__":
    sys.exit(main())
