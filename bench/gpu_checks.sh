#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one run with a time limit per step (the README's
# "What was run where" says when they last ran and on what):
#
#   1. `pytest -m gpu`: every CUDA path of the library (no Ray, no MLflow needed);
#   2. the not-slow trainables and storage suites on the GPU machine (the library defaults
#      to the GPU there: encoders, the encode CLI and the ensembles take other kernels);
#   3. a Ray search on one GPU: the margin sweep at the paper's model size, 4 trials
#      packed with --gpus-per-trial 0.25 (each capped to a quarter of the memory), tracked
#      in MLflow, interrupted by SIGINT after its first epochs, resumed from its checkpoints
#      to the end, its best model registered; then that model loaded in a CPU-only process;
#   4. `fused` (not in the default steps): fused trials against one lone trial, n = 1024 at
#      batch 32 and 128, and the fused-seeds equivalence tests on the GPU;
#   5. `eval` (not in the default steps): the evaluation's share of the paper-sized run.
#
#   bench/gpu_checks.sh OUT_DIR [STEP...]       # steps: gpu suite search fused eval
#                                               # (default: gpu suite search)
#
# OUT_DIR receives checks.log (every step's output and exit status), summary.txt (the
# search's last lines and the registered model's check), mlflow.db (the search's
# tracking store, to open with `mlflow ui` elsewhere) and runs.tar.gz (its MLflow
# artifacts, search record, Optuna study and report, without model files). The search needs Ray, Optuna and
# MLflow importable (PYTHONPATH); the other steps need only torch, numpy, scipy, pyarrow,
# pyyaml, pillow and pytest (pytest-xdist and pytest-timeout where present).
# SEARCH_ARGS replaces the search's size options (a CPU dry run: SEARCH_ARGS="--smoke-test
# --gpus-per-trial 0"); SEARCH_KILL_AFTER the seconds before the SIGINT (default 150);
# SEARCH_RUNS the runs directory (default: a new temporary one); GPU_CHECKS_DEADLINE a
# time (seconds since the epoch) no step may run past: each is cut to what is left.
set -u
out="${1:?usage: bench/gpu_checks.sh OUT_DIR [STEP...]}"
shift
steps="${*:-gpu suite search}"
mkdir -p "$out"
log="$out/checks.log"
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."

say() { echo "$*" | tee -a "$log"; }

# step NAME LIMIT COMMAND...: run COMMAND with a time limit, its output into the log
step() {
    local name="$1" limit="$2" started code left
    shift 2
    if [[ -n "${GPU_CHECKS_DEADLINE:-}" ]]; then # clamp to what is left of the deadline
        left=$((GPU_CHECKS_DEADLINE - $(date +%s) - 5))
        ((left < limit)) && limit=$left
        if ((limit < 20)); then
            say "== $name: skipped, ${left} s left before GPU_CHECKS_DEADLINE"
            return 124
        fi
    fi
    say "== $name (limit ${limit} s): $*"
    started=$(date +%s)
    timeout -k 15 "$limit" "$@" >>"$log" 2>&1
    code=$?
    say "== $name: exit $code after $(($(date +%s) - started)) s"
    return $code
}

say "gpu_checks $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>"$log" 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
      'cudnn', torch.backends.cudnn.version(), torch.cuda.get_device_name(0)
      if torch.cuda.is_available() else 'no GPU')" 2>&1 | tee -a "$log"

xdist=()
python3 -c "import xdist" 2>/dev/null && xdist=(-n 8)

for what in $steps; do
    case "$what" in
    gpu)
        # the two files by name: collecting all of tests/ imports Ray, MLflow and Optuna
        step gpu-tests 240 python3 -m pytest -m gpu tests/trainables/test_gpu.py \
            tests/storage/test_gpu.py -q -p no:cacheprovider -rs
        ;;
    suite)
        step trainables-storage 300 python3 -m pytest -m "not slow" tests/trainables \
            tests/storage -q -p no:cacheprovider "${xdist[@]}"
        ;;
    search)
        runs="${SEARCH_RUNS:-$(mktemp -d)/runs}"
        read -r -a size <<<"${SEARCH_ARGS:---gpus-per-trial 0.25 --num-samples 4 --epochs 3}"
        search=(python3 -m gridsearch.run --space margin_sweep --runs-dir "$runs"
            --experiment gpu-sweep --no-dashboard --no-baselines)
        # the first part is interrupted (SIGINT, as Ctrl+C) once its trials are under way,
        # and given two minutes to checkpoint and stop before it is killed
        say "== search-interrupted: SIGINT after ${SEARCH_KILL_AFTER:-150} s"
        started=$(date +%s)
        timeout -s INT -k 120 "${SEARCH_KILL_AFTER:-150}" "${search[@]}" "${size[@]}" >>"$log" 2>&1
        say "== search-interrupted: exit $? after $(($(date +%s) - started)) s"
        step search-resumed 420 "${search[@]}" --resume
        tail -n 30 "$log" >"$out/summary.txt"
        # the registered best model, loaded where no GPU is visible
        step registered-on-cpu 120 env CUDA_VISIBLE_DEVICES= python3 -c "
import numpy as np, torch
from trainables.encoder import SentenceEncoder
assert not torch.cuda.is_available()
uri = 'sqlite:///$runs/mlflow.db'
encoder = SentenceEncoder.load('models:/grounded-margin_sweep@best-retrieval', tracking_uri=uri)
vectors = encoder.encode(['A small red circle.', 'Two blue squares.'])
print('registered model on', encoder.device, vectors.shape, vectors.dtype,
      'norms', np.linalg.norm(vectors, axis=1).round(4))
"
        tail -n 3 "$log" >>"$out/summary.txt"
        [[ -n "${SEARCH_REPORT:-}" ]] && step report 180 python3 -m analysis.report \
            --runs-dir "$runs" --experiment gpu-sweep --out "$runs/report"
        # the tracking store and what the MLflow UI and the report show, without the models
        cp "$runs/mlflow.db" "$out/mlflow.db" 2>/dev/null
        tar -czf "$out/runs.tar.gz" -C "$runs" --exclude='*.pt' --exclude='*.pth' \
            --exclude='*/model/*' --exclude='world*' mlartifacts searches \
            tune/gpu-sweep.optuna.db $([[ -d "$runs/report" ]] && echo report) >>"$log" 2>&1
        ;;
    fused)
        step fused-tests 180 python3 -m pytest -q -p no:cacheprovider \
            tests/trainables/test_fused.py tests/trainables/test_fused_seeds.py -m "not slow"
        step fused-b32 240 python3 bench/bench_fused.py --device cuda --k 1 2 4 8 16 \
            --hidden-size 1024 --batch-size 32 --steps 20 --warmup 3
        step fused-b128 180 python3 bench/bench_fused.py --device cuda --k 1 4 16 \
            --hidden-size 1024 --batch-size 128 --steps 10 --warmup 2
        ;;
    eval)
        step eval-battery 420 python3 bench/bench_eval.py --part battery --device cuda
        ;;
    *)
        say "unknown step $what (expected gpu, suite, search, fused or eval)"
        ;;
    esac
done
say "gpu_checks done $(date -u +%FT%TZ)"
