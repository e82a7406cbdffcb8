#!/usr/bin/env bash
# The GPU checks, as one script for a lent GPU machine (about 10 minutes on an H200, estimated from earlier runs): the
# CUDA test module (exact answers and unbiasedness with the model, states and generator on the GPU, the step programs
# in CUDA graphs of every size that leaves a boundary, half-split and TF32-split products, the rounded paths and
# compiled elementwise work), the AIS step against its bare products for each way of running the loop
# (scripts/benchmark_gibbs.py --devices cuda), the paper-scale run (AIS with 5,000 chains and RAISE on 100 test
# vectors x 50 chains at K = 100,000 on the shared 784-500 RBM) at the defaults (step programs in graphs, elementwise
# work compiled for a run this long) and on the half and TF32 paths (--gpu-products half-path, tf32-path), a kernel
# profile of the half path's step, a DBM on CUDA (heating RAISE through the programs), and, unless SKIP_BDMC=1, BDMC
# on CUDA (HMC in CUDA graphs, the default, and the eager loop, RAISE_EVAL_STEP_PROGRAMS=never) against the machine's
# CPUs; where DATA_DIR holds ising_torus/ (scripts/prepare_gpu_data.py --ising), the 32 x 32 Ising torus (a fully
# visible model) at K = 3,000 on CUDA, eagerly and at the defaults (its site scan in CUDA graphs).
# PAPER_RUNS="default tf32_split" (say) runs only those of the paper-scale runs (eager, default, compile, tf32_split,
# half_split, half_path, tf32_path; by default default, half_path and tf32_path). OPEN_ONLY=1 runs only what issue 46
# still has to show (the CUDA tests, the benchmark, the paper-scale runs and a kernel profile of the half path's step;
# about 7 minutes on an H200, estimated).
#
#   python scripts/prepare_gpu_data.py --out .gpu --ising    # DATA_DIR from ../shared/data (28 MB)
#   bash scripts/check_gpu.sh .gpu OUT_DIR                   # on the GPU machine, .gpu copied beside the code
#
# Run it from the repository's root in the Python environment to test: it pip-installs the checkout (-e, no
# dependencies) into that environment first. Reading the rounded paths' runs: AIS's log Z should agree with the
# default run's within their standard errors (their ends are the model's), RAISE may differ by
# settings.gpu_rounding.raise_shift (about -0.0004 nats for this RBM by scripts/measure_rounding_gap.py) on top of
# its standard error, and the wall time is the point.
#
# DATA_DIR holds mnist_test.npz and mnist_train.npz (binarized MNIST as (N, 784) arrays) and
# rbm_mnist_sgd_grosse_salakhutdinov_2015.npz (../shared/data/checkpoints); where it also holds
# data/binarized_mnist/binarized_mnist_test.amat, the cost model's predictions are timed against its runs
# (scripts/benchmark_cost_estimate.py; COST_CASES picks the cases). Each step has its own time limit and
# the script goes on after a failure; the last lines are a table of each step's exit status and wall time.
set -uo pipefail
DATA=${1:?DATA_DIR}
OUT=${2:?OUT_DIR}
mkdir -p "$OUT"
LOG="$OUT/check.log"
SUMMARY=()
export PYTHONUNBUFFERED=1

step() {  # step NAME LIMIT_S COMMAND...
  local name=$1 limit=$2
  shift 2
  echo "=== $name: $*" | tee -a "$LOG"
  local t0=$SECONDS
  timeout "$limit" "$@" 2>&1 | tr '\r' '\n' | grep -v "it/s\]" | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  SUMMARY+=("$(printf '%-26s rc %-3s %5ss' "$name" "$rc" "$((SECONDS - t0))")")
}

step environment 60 bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; \
  python3 -c 'import torch, triton; print(torch.__version__, torch.cuda.get_device_name(0), \"triton\", triton.__version__)'; nproc"
step install 90 python3 -m pip install -q --no-deps --no-build-isolation -e .
step test_cuda 300 env RAISE_EVAL_TEST_DEVICE=cuda python3 -m pytest tests/test_cuda.py -q -rs -p no:cacheprovider \
  --durations=5
step cli_default 45 raise-eval evaluate checkpoints/rbm_digits_64-16.pt --device cuda --no-progress
for chains in 1000 5000; do
  step "benchmark_gibbs_$chains" 120 python3 scripts/benchmark_gibbs.py --devices cuda --chains "$chains" --steps 100 \
    --repeats 5
done
PAPER=(evaluate "$DATA/rbm_mnist_sgd_grosse_salakhutdinov_2015.npz" --device cuda --data "$DATA/mnist_test.npz"
  --train-data "$DATA/mnist_train.npz" --steps 100000 --ais-chains 5000 --raise-examples 100 --raise-chains 50
  --exact never --no-progress)
for run in ${PAPER_RUNS:-default half_path tf32_path}; do  # PAPER_RUNS: some of these, for less device time
  case $run in
    eager) step paper_scale_eager 120 raise-eval "${PAPER[@]}" --loop eager --json "$OUT/paper_scale_eager.json" ;;
    default) step paper_scale_default 120 raise-eval "${PAPER[@]}" --json "$OUT/paper_scale_default.json" ;;
    compile) step paper_scale_compile 120 raise-eval "${PAPER[@]}" --gpu-fuse compile \
      --json "$OUT/paper_scale_compile.json" ;;
    half_split) step paper_scale_half_split 120 raise-eval "${PAPER[@]}" --gpu-products half-split --gpu-fuse compile \
      --json "$OUT/paper_scale_half_split.json" ;;
    tf32_split) step paper_scale_tf32_split 120 raise-eval "${PAPER[@]}" --gpu-products tf32-split --gpu-fuse compile \
      --json "$OUT/paper_scale_tf32_split.json" ;;
    half_path) step paper_scale_half_path 120 raise-eval "${PAPER[@]}" --gpu-products half-path \
      --json "$OUT/paper_scale_half_path.json" ;;
    tf32_path) step paper_scale_tf32_path 120 raise-eval "${PAPER[@]}" --gpu-products tf32-path \
      --json "$OUT/paper_scale_tf32_path.json" ;;
  esac
done
step profile_half_path 60 python3 scripts/profile_gpu_step.py --chains 5000 --fuse compile --products half-path
if [ "${OPEN_ONLY:-0}" = 1 ]; then
  printf '%s\n' "${SUMMARY[@]}" | tee -a "$LOG"
  exit 0
fi
step cli_half_split 45 raise-eval evaluate checkpoints/rbm_digits_64-16.pt --device cuda --gpu-products half-split \
  --no-progress --json "$OUT/half_split_digits.json"
step cli_dbm 60 raise-eval evaluate checkpoints/dbm_mnist_20-500.pt --device cuda --data "$DATA/mnist_test.npz" \
  --train-data "$DATA/mnist_train.npz" --steps 10000 --raise-examples 100 --raise-chains 20 --exact never --no-progress
if [ -f "$DATA/ising_torus/ising.npz" ]; then  # a fully visible model: its site scan in CUDA graphs against eagerly
  ISING=(evaluate "$DATA/ising_torus/ising.npz" --data "$DATA/ising_torus/test.npy" --device cuda --steps 3000
    --ais-chains 300 --raise-examples 50 --raise-chains 4 --no-progress)
  step ising_eager 120 raise-eval "${ISING[@]}" --loop eager --json "$OUT/ising_eager.json"
  step ising_default 120 raise-eval "${ISING[@]}" --json "$OUT/ising_default.json"
fi
if [ "${SKIP_BDMC:-0}" != 1 ]; then
  BDMC=(bdmc checkpoints/vae_mnist_z10.pt --examples 20 --chains 10 --steps 1000 --iwae 1 100 --no-progress)
  step bdmc_cuda_eager 60 env RAISE_EVAL_STEP_PROGRAMS=never raise-eval "${BDMC[@]}" --device cuda \
    --json "$OUT/bdmc_cuda_eager.json"
  for device in cuda cpu; do
    step "bdmc_$device" 60 raise-eval "${BDMC[@]}" --device "$device" --json "$OUT/bdmc_$device.json"
  done
fi
if [ -d "$DATA/data/binarized_mnist" ]; then  # the cost model against measured times (binarized MNIST's test split)
  step cost_model 150 env RAISE_EVAL_DATA="$DATA/data" python3 scripts/benchmark_cost_estimate.py --device cuda \
    --cases ${COST_CASES:-digits rbm500 dbm exact dbn} --json "$OUT/cost_model.json"
fi
printf '%s\n' "${SUMMARY[@]}" | tee -a "$LOG"
