"""The recurrent layer alone on the CPU: forward + backward of ``nn.GRU``/``nn.LSTM`` on a
packed batch against the hand-written packed layers the caption encoder trains through on
the CPU (``trainables._packed_rnn``), its two directions one after the other with all of
torch's threads and side by side on two threads (with ``--threads`` >= 2), each with
its per-step loop in C++ and in Python (``--loops``). They take turns, best of the
repeats; the ratios are torch's time over the hand-written ones.

    python bench/bench_rnn.py                              # GRU and LSTM, n 256 and 1024
    python bench/bench_rnn.py --cells lstm --hidden-sizes 1024 --batch-sizes 32 128
    python bench/bench_rnn.py --threads 2 --against /tmp/before   # A/B with another checkout
    python bench/bench_rnn.py --threads 2 --loops cpp               # the C++ loop only

Inputs are a character embedding's width (20) with caption lengths drawn uniformly from
30-99 characters (the embedded world's are 20-80, Flickr8k's mostly 30-100), one fixed
batch per setting; a check first asserts both give the same outputs (float32, 1e-4).
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

if not __package__:  # run as a file: the repository first on sys.path (see bench/__init__.py)
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import torch
from torch.nn.utils.rnn import pack_padded_sequence

from bench import _common
from bench._cli import BadInput, entry, parser
from trainables import LOOPS, packed_bidirectional

CELLS: dict[str, type[torch.nn.GRU | torch.nn.LSTM]] = {"gru": torch.nn.GRU, "lstm": torch.nn.LSTM}


def load_before(tree: Path) -> ModuleType:
    """``--against``: another checkout's packed layer (its ``trainables/_packed_rnn.py``)."""
    path = tree / "trainables" / "_packed_rnn.py"
    if not path.is_file():
        raise BadInput(f"error: --against {tree}: no trainables/_packed_rnn.py in it")
    spec = importlib.util.spec_from_file_location("before_packed_rnn", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _hand(how: str) -> tuple[bool, str]:
    """(side by side, loop) of a hand-written arrangement: "hand-cpp", "side-python"..."""
    arrangement, loop = how.split("-")
    return arrangement == "side", loop


def step(
    rnn: torch.nn.GRU | torch.nn.LSTM,
    x: torch.Tensor,
    lengths: torch.Tensor,
    how: str,
    before: ModuleType | None = None,
) -> float:
    """Seconds for one forward + backward through ``rnn`` (``how`` "torch"), or the
    hand-written layer ("hand-<loop>": the directions one after the other; "side-<loop>":
    side by side; "before": ``before``'s, with its own defaults)."""
    started = time.perf_counter()
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    if how == "torch":
        out = rnn(packed)[0].data
    elif how == "before" and before is not None:  # --against: that checkout's layer
        out = before.packed_bidirectional(packed.data, packed.batch_sizes, rnn)
    else:
        side, loop = _hand(how)
        out = packed_bidirectional(packed.data, packed.batch_sizes, rnn, side, loop=loop)
    out.sum().backward()
    return time.perf_counter() - started


def measure(
    cell: str,
    n: int,
    batch: int,
    repeats: int,
    seed: int,
    loops: list[str],
    before: ModuleType | None = None,
) -> dict[str, float]:
    generator = torch.Generator().manual_seed(seed)
    rnn = CELLS[cell](20, n, batch_first=True, bidirectional=True)
    lengths = torch.randint(30, 100, (batch,), generator=generator)
    x = torch.randn(batch, int(lengths.max()), 20, generator=generator, requires_grad=True)
    with torch.no_grad():
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        want = rnn(packed)[0].data
    hows = ["torch"] + [f"hand-{loop}" for loop in loops]
    hows += [f"side-{loop}" for loop in loops] if torch.get_num_threads() >= 2 else []
    for how in hows[1:]:
        side, loop = _hand(how)
        with torch.enable_grad():
            got = packed_bidirectional(packed.data, packed.batch_sizes, rnn, side, loop=loop)
        torch.testing.assert_close(got.detach(), want, rtol=1e-4, atol=1e-4)
    hows += ["before"] if before is not None else []
    best = dict.fromkeys(hows, float("inf"))
    for _ in range(repeats):
        for how in hows:
            rnn.zero_grad(set_to_none=True)
            best[how] = min(best[how], step(rnn, x, lengths, how, before))
    return best


@entry
def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--cells", nargs="+", choices=tuple(CELLS), default=list(CELLS),
                   help="the recurrent cells")  # fmt: skip
    p.add_argument("--hidden-sizes", type=int, nargs="+", default=[256, 1024], help="n")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 128], help="captions")
    p.add_argument("--repeats", type=int, default=3, help="best of this many")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=0, help="the inputs' and weights' seed")
    p.add_argument("--loops", nargs="+", choices=LOOPS, default=list(LOOPS),
                   help="the hand-written layer's per-step loops to time")  # fmt: skip
    p.add_argument("--against", type=Path, default=None,
                   help="another checkout whose layer to time alongside (an A/B)")  # fmt: skip
    args = p.parse_args(argv)
    if min(*args.hidden_sizes, *args.batch_sizes, args.repeats, args.threads) < 1:
        p.error("--hidden-sizes, --batch-sizes, --repeats and --threads: expected at least 1")
    before = load_before(args.against) if args.against is not None else None
    torch.set_num_threads(args.threads)
    where = torch.device("cpu")
    print(f"{_common.machine(where)}; {args.threads} thread(s); best of {args.repeats}\n")
    if before is not None:
        print(f"before: {args.against}")
    label = {"hand": "in turn", "side": "side by side"}
    columns: list[str] = []
    header = "| cell | n | batch | torch s |"
    for cell in args.cells:
        for n in args.hidden_sizes:
            for batch in args.batch_sizes:
                best = measure(cell, n, batch, args.repeats, args.seed, args.loops, before)
                if not columns:
                    columns = [how for how in best if how != "torch"]
                    for how in columns:
                        arrangement, _, loop = how.partition("-")
                        name = how if how == "before" else f"{loop}, {label[arrangement]}"
                        header += f" {name} s | speed-up |"
                    print(header)
                    print("| --- | --- | --- | --- |" + " --- | --- |" * len(columns))
                base = best["torch"]
                cells = [f"{best[how]:.3f} | {base / best[how]:.2f}x" for how in columns]
                print(f"| {cell} | {n} | {batch} | {base:.3f} | " + " | ".join(cells) + " |",
                      flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
