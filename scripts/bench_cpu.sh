#!/usr/bin/env bash
# bench_cpu.sh: loom's cpu-backend speed (tokens/s, GFLOP/s, % of measured fp32 GEMM peak) vs PyTorch.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF'
usage: scripts/bench_cpu.sh [--build DIR] [--configs "a b"] [--layouts "1x2 2x1"] [--runs R]
                            [--no-torch] [--no-wait] [--keep]
Benchmarks `loom train` on this machine and prints one table:
  a: GPT-2 L4 H4 C256 vocab 50257, T64 B4     b: GPT-2 124M (12L 12H 768C vocab 50257), T256 B4
  layouts: 1x2 = one rank with 2 threads (cores), 2x1 = two data-parallel ranks with 1 thread each
           (general form RxT: R ranks; loom itself picks cores/R threads per rank)
Columns: tokens/s (median over timed steps of `loom train`, median of R runs), model GFLOP/s by
loom's formula (src/train/flops.h: 6*N_nonpos + 12*L*C*T per token), its % of the machine's fp32
peak measured here by bench_gemm_peak (large square OpenBLAS sgemm on all cores), the share of the
step spent in GEMMs and their GFLOP/s (bench_step: timers around every BLAS call; per rank, against
the per-rank peak), PyTorch tokens/s of the same model, batch and AdamW on the same cores
(scripts/bench_vs_torch.py, /usr/bin/python3 with python3-torch), and loom/torch.
  --build DIR   loom build folder (default build; built with scripts/build.sh when missing)
  --runs R      runs of `loom train` per row (default 3); the median is reported
  --no-torch    skip PyTorch          --no-wait  do not wait for an idle machine first
  --keep        keep the run folders under runs/bench_cpu_*
EOF
}

BUILD=build CONFIGS="a b" LAYOUTS="1x2 2x1" RUNS=3 TORCH=1 WAIT=1 KEEP=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --configs) CONFIGS="$2"; shift 2 ;;
    --layouts) LAYOUTS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --no-torch) TORCH=0; shift ;;
    --no-wait) WAIT=0; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_cpu.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

LOOM="$BUILD/bin/loom"
if [[ ! -x "$LOOM" || ! -x "$BUILD/bin/bench_gemm_peak" || ! -x "$BUILD/bin/bench_step" ]]; then
  if [[ "$BUILD" == build ]]; then ./scripts/build.sh >/dev/null; fi
  [[ -x "$LOOM" && -x "$BUILD/bin/bench_step" ]] || {
    echo "bench_cpu.sh: $LOOM or the bench programs are missing: cmake --build $BUILD" >&2; exit 1; }
fi
TORCH_PY=/usr/bin/python3
if [[ $TORCH == 1 ]] && ! "$TORCH_PY" -c "import torch" 2>/dev/null; then
  echo "bench_cpu.sh: no PyTorch for $TORCH_PY (LOOM_SETUP_TORCH=1 scripts/setup.sh); skipping it" >&2
  TORCH=0
fi
if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
unset OMP_NUM_THREADS  # loom's own rule: threads per rank = cores / ranks on the node
CORES=$(nproc)

DATA=data/bench/random_50257
if [[ ! -f $DATA.bin ]]; then python3 scripts/make_random_dataset.py --output-prefix "$DATA" >/dev/null; fi

# Waits (up to 10 min) until the other processes of the machine use under 10% of its CPU time.
wait_quiet() {
  [[ $WAIT == 1 ]] || return 0
  local t0=$SECONDS
  while (( SECONDS - t0 < 600 )); do
    local a b
    a=$(awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat)
    sleep 2
    b=$(awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat)
    local busy
    busy=$(echo "$a $b" | awk '{d=$4-$2; print (d>0) ? int(100*($3-$1)/d) : 0}')
    (( busy < 10 )) && return 0
    sleep 5
  done
  echo "bench_cpu.sh: warning: the machine stayed busy (other processes); figures are noisy" >&2
}

median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# Model shape per config: name, loom config + overrides, torch arguments, steps to run.
config_args() {
  case "$1" in
    a) echo "configs/bench_cpu.yaml --set train.steps=20" ;;
    b) echo "configs/gpt2_124m.yaml --set model.seq_len=256 --set parallel.micro_batch_size=4 \
--set train.global_batch_size=4 --set train.steps=7 --set data.valid=[] --set train.log_interval=1 \
--set train.eval_interval=0" ;;
    *) echo "bench_cpu.sh: unknown config '$1' (a or b)" >&2; exit 2 ;;
  esac
}
torch_args() {
  case "$1" in
    a) echo "--n-layer 4 --n-head 4 --d-model 256 --seq-len 64 --batch 4 --steps 8 --warmup 2" ;;
    b) echo "--n-layer 12 --n-head 12 --d-model 768 --seq-len 256 --batch 4 --steps 3 --warmup 1" ;;
  esac
}
describe() { case "$1" in a) echo "L4 H4 C256 V50257 T64 B4" ;; b) echo "124M 12L 12H 768C T256 B4" ;; esac; }

# Runs loom (R ranks) and prints the median tokens/s of steps >= 3 from metrics.jsonl.
loom_tps() {
  local cfg=$1 ranks=$2 dir=$3
  local -a cmd
  read -r -a cargs <<<"$(config_args "$cfg")"
  local common=(train "${cargs[@]}" --set "data.train=[$DATA]" --set "run.dir=$dir"
                --set parallel.dp="$ranks" --set checkpoint.save_interval=0 --set checkpoint.resume=none)
  if [[ $cfg == b || $ranks -gt 1 ]]; then
    common+=(--set parallel.micro_batch_size=$((4 / ranks)))
  fi
  rm -rf "$dir"
  if (( ranks == 1 )); then cmd=("$LOOM" "${common[@]}")
  else cmd=(mpirun -np "$ranks" --bind-to none "$LOOM" "${common[@]}"); fi
  "${cmd[@]}" >"$dir.log" 2>&1 || { echo "bench_cpu.sh: loom failed, see $dir.log" >&2; tail -5 "$dir.log" >&2; exit 1; }
  grep -o '"step":[0-9]*\|"tokens_per_s":[0-9.e+]*' "$dir/metrics.jsonl" | paste - - |
    awk -F'[:\t]' '$2 >= 3 {print $4}' | median
}

# bench_step (same trainer, timers around the GEMMs): prints "share gflops_per_rank flops_per_token".
gemm_split() {
  local cfg=$1 ranks=$2 dir=$3
  read -r -a cargs <<<"$(config_args "$cfg")"
  local args=("${cargs[@]}" --set "data.train=[$DATA]" --set "run.dir=$dir" --set parallel.dp="$ranks"
              --set checkpoint.save_interval=0 --set checkpoint.resume=none)
  if [[ $cfg == b || $ranks -gt 1 ]]; then args+=(--set parallel.micro_batch_size=$((4 / ranks))); fi
  local out
  if (( ranks == 1 )); then out=$("$BUILD/bin/bench_step" "${args[@]}" 2>&1)
  else out=$(mpirun -np "$ranks" --bind-to none "$BUILD/bin/bench_step" "${args[@]}" 2>&1); fi
  echo "$out" | grep -o 'gemm_share=[0-9.]* gemm_gflops_per_rank=[0-9.]* flops_per_token=[0-9.e+]*' |
    tr '=' ' ' | awk '{print $2, $4, $6}'
}

wait_quiet
peak_all=$("$BUILD/bin/bench_gemm_peak" --threads "$CORES" | grep -o 'peak_gflops=[0-9.]*' | cut -d= -f2)
wait_quiet
peak_one=$("$BUILD/bin/bench_gemm_peak" --threads 1 | grep -o 'peak_gflops=[0-9.]*' | cut -d= -f2)
core=$("$BUILD/bin/bench_gemm_peak" --reps 1 --size 256 | grep -o 'core=[A-Za-z0-9]*' | cut -d= -f2)
echo "machine: $CORES cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), OpenBLAS $core kernels"
echo "measured fp32 GEMM peak (best of sgemm 1024..4096 square): $peak_all GFLOP/s on $CORES threads, $peak_one GFLOP/s on 1 thread"
printf '%-28s %-7s %9s %8s %6s %6s %9s %9s %8s\n' config layout "tok/s" "GFLOP/s" "%peak" "GEMM%" "GEMM GF/s" "torch t/s" loom/torch
for cfg in $CONFIGS; do
  torch_tps=nan
  if [[ $TORCH == 1 ]]; then
    wait_quiet
    read -r -a targs <<<"$(torch_args "$cfg")"
    torch_tps=$("$TORCH_PY" scripts/bench_vs_torch.py "${targs[@]}" --threads "$CORES" |
                grep -o 'tokens_per_s=[0-9.]*' | cut -d= -f2)
  fi
  for lay in $LAYOUTS; do
    ranks=${lay%x*}
    dir=runs/bench_cpu_${cfg}_${lay}
    mkdir -p runs
    tps_runs=()
    for ((r = 0; r < RUNS; r++)); do
      wait_quiet
      tps_runs+=("$(loom_tps "$cfg" "$ranks" "$dir")")
    done
    tps=$(printf '%s\n' "${tps_runs[@]}" | median)
    wait_quiet
    read -r share ggf fpt <<<"$(gemm_split "$cfg" "$ranks" "$dir.gemm")"
    gf=$(awk -v f="$fpt" -v t="$tps" 'BEGIN {printf "%.1f", f * t / 1e9}')
    pct=$(awk -v g="$gf" -v p="$peak_all" 'BEGIN {printf "%.0f", 100 * g / p}')
    ratio=$(awk -v a="$tps" -v b="$torch_tps" 'BEGIN {if (b == "nan" || b == 0) print "-"; else printf "%.1fx", a/b}')
    printf '%-28s %-7s %9.1f %8.1f %5s%% %5.0f%% %9.1f %9s %8s\n' "$cfg: $(describe "$cfg")" "$lay" \
      "$tps" "$gf" "$pct" "$(awk -v s="$share" 'BEGIN {print 100*s}')" "$ggf" "$torch_tps" "$ratio"
    [[ $KEEP == 1 ]] || rm -rf "$dir" "$dir.log" "$dir.gemm"
  done
done
echo "GEMM GF/s is per rank: compare 1-thread ranks with the 1-thread peak ($peak_one)."
