"""The optimiser step of a lone trial: ``trainables.optim.GroupAdam`` (every trial's, lone
or fused) against ``torch.optim.Adam`` (the lone trial's before), on the paper model's
parameters at hidden size n, both from the same weights with the same gradients, taking
turns, best of the repeats. Also each one's first construction in a fresh process, as a
trial process builds it (``torch.optim.Adam``'s imports ``torch._dynamo``), in CPU
seconds of that process.

    python bench/bench_optim.py                             # n = 1024, on the default device
    python bench/bench_optim.py --device cuda --steps 200   # a GPU's launches per step

Printed: milliseconds per step of each, their ratio (ours / torch's; below 1 is faster),
whether the two ended with the same weights (bit for bit, or the largest difference), and
the two first constructions.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

if not __package__:  # run as a file: the repository first on sys.path (see bench/__init__.py)
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import torch

from bench import _common
from bench._cli import BadInput, entry, parser
from bench._timing import time_alternately
from trainables.config import TrainConfig
from trainables.model import GroundedEncoder
from trainables.optim import GroupAdam

FEATURES = 2048  # ResNet-152's pooled features, the paper's image side

_FIRST = """
import time, torch
p = torch.nn.Parameter(torch.zeros(4))
started = time.process_time()
if {torch_adam}:
    torch.optim.Adam([p])
else:
    from trainables.optim import GroupAdam
    GroupAdam({{"p": p}})
print(time.process_time() - started)
"""


def first_construction(torch_adam: bool) -> float:
    """CPU seconds of the first construction in a fresh process (torch already imported)."""
    code = _FIRST.format(torch_adam=torch_adam)
    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=root, check=True)  # fmt: skip
    return float(done.stdout.split()[-1])


@entry
def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--hidden-size", type=int, default=1024, help="n")
    p.add_argument("--steps", type=int, default=50, help="steps per timed round")
    p.add_argument("--repeats", type=int, default=3, help="best of this many rounds")
    args = p.parse_args(argv)
    if min(args.hidden_size, args.steps, args.repeats) < 1:
        raise BadInput("error: --hidden-size, --steps and --repeats: expected at least 1")
    where = _common.device(args.device)
    torch.manual_seed(0)
    model = GroundedEncoder(TrainConfig(hidden_size=args.hidden_size), FEATURES).to(where)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    grads = {n: torch.randn_like(p) for n, p in start.items()}

    def params() -> dict[str, torch.nn.Parameter]:
        out = {n: torch.nn.Parameter(p.clone()) for n, p in start.items()}
        for n, p in out.items():
            p.grad = grads[n]
        return out

    ours, theirs = params(), params()
    group_adam = GroupAdam(ours)
    torch_adam = torch.optim.Adam(theirs.values())
    runs = {
        "torch.optim.Adam": lambda: [torch_adam.step() for _ in range(args.steps)],
        "GroupAdam": lambda: [group_adam.step(1e-3) for _ in range(args.steps)],
    }
    best, _ = time_alternately(runs, where, args.repeats)
    count = sum(p.numel() for p in start.values())
    print(f"{_common.machine(where)}; n = {args.hidden_size}: {len(start)} parameters, "
          f"{count:,} weights; {args.steps} steps, best of {args.repeats}\n")  # fmt: skip
    for name, seconds in best.items():
        print(f"{name:>17}: {seconds / args.steps * 1e3:8.3f} ms a step")
    print(f"{'ratio':>17}: {best['GroupAdam'] / best['torch.optim.Adam']:8.2f} (ours / torch's)")
    differences = [float((ours[n] - theirs[n]).detach().abs().max()) for n in start]
    same = "bit for bit" if not any(differences) else f"largest difference {max(differences):.3g}"
    print(f"{'weights':>17}: {same} after {args.steps * args.repeats} steps each")
    print("first construction in a fresh process (CPU s): "
          f"torch.optim.Adam {first_construction(True):.3f}, "
          f"GroupAdam {first_construction(False):.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
