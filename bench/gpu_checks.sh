#!/usr/bin/env bash
# The checks that need a CUDA GPU, sized to one loan of a GPU machine (15 minutes of device
# time with the machine's start, at most 10 minutes a command): two parts, run one after the
# other on the same machine, each under its own deadline.
#
#   part1, at most 8 minutes, torch only:
#     gpu     `pytest -m gpu`: every CUDA path of the library (no Ray, MLflow or Optuna)
#     fused   bench/bench_fused.py at n = 1024, batch 32 and 128, in one process: the
#             authors' loop, one lone trial, and k = 1, 4, 16 fused trials
#     eval    bench/bench_eval.py --part epoch: the evaluation's share of a paper-sized epoch
#     optim   bench/bench_optim.py: the optimiser step against torch.optim.Adam's, n = 1024
#   part2, at most 4 minutes, Ray, Optuna and MLflow unpacked from .gpu/site312.tar.xz:
#     search  the margin sweep through Ray at the paper's model size, 4 trials packed on
#             the GPU (--gpus-per-trial 0.25), SIGINT once under way, --resume to the end,
#             the registered model then loaded in a process that sees no GPU
#   part3, not in a 15-minute loan:
#     sweep16 the paper's 16-margin sweep, 8 epochs, fused, from `python -m gridsearch.run`
#
#   python bench/gpu_prepare.py --authors-repo PATH     # here, once: builds .gpu/
#   bash bench/gpu_checks.sh OUT_DIR part1               # there, carrying .gpu
#   bash bench/gpu_checks.sh OUT_DIR part2
#   bash bench/gpu_checks.sh --cpu OUT_DIR part1 part2   # the dry run on a CPU, tiny sizes
#
# --address ADDR (before OUT_DIR): the searches join that Ray cluster instead of starting
# a local Ray each (the tests' dry run joins theirs). --store DIR (with --cpu, before
# OUT_DIR): the dry run's benchmarks read the embedded world in DIR (120 images or more,
# with its semantic sets) instead of the one built once under /tmp (the tests pass the
# world their session already built).
#
# Steps can also be named alone (`gpu fused eval optim search sweep16`). OUT_DIR receives
# checks.log (every step's command, output and exit status), figures.txt (the benchmarks'
# tables and the search's last lines), and after part2 mlflow.db (the search's tracking
# store) and runs.tar.gz (its MLflow artifacts, search record and Optuna study, no models).
# Each part stops at its deadline (8 and 4 minutes from its start; GPU_CHECKS_DEADLINE, a
# time in seconds since the epoch, cuts it shorter): every step's limit is clamped to what
# is left, and a step with under 20 s left is skipped and said so. --cpu runs the same steps
# on the CPU at tiny sizes (the GPU group as its dry run, GROUNDED_GPU_TESTS_DEVICE=cpu):
# what the tests run to check this script. The exit status is the number of failed steps.
set -u
cpu=0
address=()
store=""
while [[ "${1:-}" == --* ]]; do
    case "$1" in
    --cpu) cpu=1 && shift ;;
    --address) address=(--address "${2:?--address: expected a Ray address}") && shift 2 ;;
    --store) store="${2:?--store: expected a store directory}" && shift 2 ;;
    *)
        echo "error: $1: unknown option (expected --cpu, --address ADDR or --store DIR)" >&2
        exit 2
        ;;
    esac
done
if [[ -n "$store" ]] && ! ((cpu)); then
    echo "error: --store: only with --cpu (the GPU run's benchmarks build their own worlds)" >&2
    exit 2
fi
usage="bench/gpu_checks.sh [--cpu] [--address ADDR] [--store DIR] OUT_DIR part1|part2|part3|STEP..."
out="${1:?usage: $usage}"
shift
mkdir -p "$out"
out="$(cd "$out" && pwd)"
log="$out/checks.log"
figures="$out/figures.txt"
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
failed=0
deadline=0

say() { echo "$*" | tee -a "$log"; }

# start_part SECONDS: the deadline of the part that starts now
start_part() {
    deadline=$(($(date +%s) + $1))
    if [[ -n "${GPU_CHECKS_DEADLINE:-}" ]] && ((GPU_CHECKS_DEADLINE < deadline)); then
        deadline=$GPU_CHECKS_DEADLINE
    fi
}

# left LIMIT: LIMIT, or the seconds left before the deadline if fewer
left() {
    local rest=$((deadline - $(date +%s) - 5))
    ((rest < $1)) && echo "$rest" || echo "$1"
}

# step NAME LIMIT COMMAND...: COMMAND under a time limit (clamped to the deadline), its
# output into the log; a non-zero exit is a failed step
step() {
    local name="$1" limit started code
    limit=$(left "$2")
    shift 2
    if ((limit < 20)); then
        say "== $name: skipped, ${limit} s left before the deadline"
        failed=$((failed + 1))
        return 124
    fi
    say "== $name (limit ${limit} s): $*"
    started=$(date +%s)
    timeout -k 15 "$limit" "$@" >>"$log" 2>&1
    code=$?
    say "== $name: exit $code after $(($(date +%s) - started)) s"
    ((code == 0)) || failed=$((failed + 1))
    return $code
}

# interrupted NAME LIMIT PATTERN COMMAND...: COMMAND sent SIGINT (as Ctrl+C) as soon as its
# output shows PATTERN, or at LIMIT, then given 30 s to stop; exit 130 (interrupted) or 0
# (it ended first) pass
interrupted() {
    local name="$1" limit pattern="$3" started code pid part
    limit=$(left "$2")
    shift 3
    if ((limit < 20)); then
        say "== $name: skipped, ${limit} s left before the deadline"
        failed=$((failed + 1))
        return 124
    fi
    say "== $name (limit ${limit} s, SIGINT at the first '$pattern'): $*"
    part="$(mktemp)"
    started=$(date +%s)
    # timeout forwards the SIGINT sent to it (a command started with & ignores its own)
    timeout -s INT -k 30 "$limit" "$@" >"$part" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null && ! grep -q -- "$pattern" "$part"; do sleep 0.5; done
    kill -INT "$pid" 2>/dev/null && say "== $name: SIGINT after $(($(date +%s) - started)) s"
    wait "$pid"
    code=$?
    cat "$part" >>"$log"
    rm -f "$part"
    say "== $name: exit $code after $(($(date +%s) - started)) s"
    ((code == 0 || code == 130)) || failed=$((failed + 1))
    return $code
}

# figure NAME: the log's lines since the step NAME started, into figures.txt
figure() {
    awk -v name="== $1 " 'index($0, name) == 1 { keep = 1 } keep' "$log" >>"$figures"
}

environment() {
    say "gpu_checks $(date -u +%FT%TZ) on $(hostname)$( ((cpu)) && echo ', --cpu dry run')"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>"$log" 2>&1
    if ((cpu)); then
        # the versions from the installed metadata: importing torch (about 2 CPU-s) to find
        # no GPU tells the dry run nothing more, and its every later step imports torch
        python3 -c "import importlib.metadata as m, sys
print('python', sys.version.split()[0], 'torch', m.version('torch'), 'not imported: --cpu')" \
            2>&1 | tee -a "$log" | tee -a "$figures"
        return
    fi
    python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch',
        torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(),
        torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')" 2>&1 |
        tee -a "$log" | tee -a "$figures"
}

# the search's packages: those installed, or the carried archive unpacked once
search_packages() {
    # found, not imported (importing the three takes about 2 CPU-s)
    python3 -c "import importlib.util as u, sys
sys.exit(not all(map(u.find_spec, ('ray', 'optuna', 'mlflow'))))" && return 0
    local site=/tmp/gpu-site
    if [[ ! -d "$site/site312" ]]; then
        mkdir -p "$site" && tar -xJf .gpu/site312.tar.xz -C "$site" ||
            { say "== .gpu/site312.tar.xz: not unpacked (python bench/gpu_prepare.py here first)"; return 1; }
    fi
    export PYTHONPATH="$site/site312${PYTHONPATH:+:$PYTHONPATH}"
    say "== search packages from .gpu/site312.tar.xz; pip check:"
    python3 -m pip check >>"$log" 2>&1
    python3 -c "import ray, optuna, mlflow; print('ray', ray.__version__, 'optuna',
        optuna.__version__, 'mlflow', mlflow.__version__)" 2>&1 | tee -a "$log"
}

run_gpu() {
    local select=() env=()
    # the dry run's three tests are in one module, which --dist loadscope gives whole to
    # one worker: -n 0 runs them in pytest's own process, without starting and collecting
    # in workers that get nothing (about 8 CPU-s on two cores)
    ((cpu)) && env=(GROUNDED_GPU_TESTS_DEVICE=cpu) &&
        select=(-n 0 -k "cuda_without_an_index or needs_no_ray or retrieval_metrics")
    # the two files by name: collecting all of tests/ imports Ray, MLflow and Optuna
    step gpu-tests 150 env "${env[@]}" python3 -m pytest -m gpu tests/trainables/test_gpu.py \
        tests/storage/test_gpu.py -q -p no:cacheprovider -rs "${select[@]}"
}

run_fused() {
    local size=(--device cuda --hidden-size 1024 --batch-size 32 128 --k 1 4 16 --steps 10
        --warmup 2)
    ((cpu)) && world && size=(--device cpu --hidden-size 16 --batch-size 8 16 --k 1 2
        --steps 2 --warmup 1 --images 96 --store "$store")
    local authors=()
    [[ -d .gpu/caption2image ]] && authors=(--authors-repo .gpu/caption2image)
    step fused 200 python3 bench/bench_fused.py "${authors[@]}" "${size[@]}"
    figure fused
}

run_eval() {
    local size=(--device cuda --repeats 2)
    ((cpu)) && world && size=(--device cpu --hidden-size 16 --steps 2 --repeats 1
        --train-images 96 --dev-images 12 --store "$store")
    step eval 130 python3 bench/bench_eval.py --part epoch "${size[@]}"
    figure eval
}

run_optim() {
    local size=(--device cuda --steps 200)
    ((cpu)) && size=(--device cpu --hidden-size 16 --steps 2 --repeats 1)
    step optim 30 python3 bench/bench_optim.py "${size[@]}"
    figure optim
}

# world: the store the --cpu dry run's benchmarks read: --store, or the 120-image embedded
# world built once under /tmp (found there by later runs), asked for once per run
world() {
    [[ -n "$store" ]] || store="$(python3 -c \
        "from bench import _common; print(_common.world(None, 120, scratch='/tmp'))" |
        tail -n 1)"
}

run_search() {
    search_packages || { failed=$((failed + 1)); return; }
    local runs="${SEARCH_RUNS:-$(mktemp -d)/runs}" size=(--gpus-per-trial 0.25 --num-samples 4
        --epochs 2)
    ((cpu)) && size=(--smoke-test --gpus-per-trial 0 --num-samples 1)
    local search=(python3 -m gridsearch.run --space margin_sweep --runs-dir "$runs"
        --experiment gpu-sweep --no-dashboard --no-baselines "${address[@]}")
    # interrupted once a trial has trained (and checkpointed) its first epoch, then resumed
    interrupted search-interrupted 90 " epoch 1/" "${search[@]}" "${size[@]}"
    step search-resumed 100 "${search[@]}" --resume
    figure search-resumed
    # the registered best model, loaded where no GPU is visible
    step registered-on-cpu 30 env CUDA_VISIBLE_DEVICES= python3 -c "
import numpy as np, torch
from trainables.encoder import SentenceEncoder
assert not torch.cuda.is_available()
uri = 'sqlite:///$runs/mlflow.db'
encoder = SentenceEncoder.load('models:/grounded-margin_sweep@best-retrieval', tracking_uri=uri)
vectors = encoder.encode(['A small red circle.', 'Two blue squares.'])
print('registered model on', encoder.device, vectors.shape, vectors.dtype,
      'norms', np.linalg.norm(vectors, axis=1).round(4))
"
    figure registered-on-cpu
    cp "$runs/mlflow.db" "$out/mlflow.db" 2>/dev/null
    tar -czf "$out/runs.tar.gz" -C "$runs" --exclude='*.pt' --exclude='*.pth' \
        --exclude='*/model/*' mlartifacts searches tune/gpu-sweep.optuna.db >>"$log" 2>&1
}

run_sweep16() {
    search_packages || { failed=$((failed + 1)); return; }
    local size=(--num-samples 16 --epochs 8 --fuse 16)
    ((cpu)) && size=(--smoke-test --num-samples 2 --gpus-per-trial 0)
    step sweep16 570 python3 -m gridsearch.run --space margin_sweep --runs-dir \
        "$(mktemp -d)/runs" --experiment sweep16 --no-dashboard --no-baselines \
        "${address[@]}" "${size[@]}"
    figure sweep16
}

environment
for what in "${@:-part1}"; do
    case "$what" in
    part1) start_part 480; run_gpu; run_fused; run_eval; run_optim ;;
    part2) start_part 240; run_search ;;
    part3) start_part 580; run_sweep16 ;;
    gpu | fused | eval | optim | search | sweep16)
        ((deadline)) || start_part 580
        "run_$what"
        ;;
    *)
        say "unknown part or step $what (expected part1, part2, part3, gpu, fused, eval, optim, search or sweep16)"
        failed=$((failed + 1))
        ;;
    esac
done
say "gpu_checks done $(date -u +%FT%TZ), $failed failed step(s)"
exit "$failed"
