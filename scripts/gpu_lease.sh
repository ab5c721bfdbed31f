#!/usr/bin/env bash
# gpu_lease.sh: the whole GPU checklist of docs/gpu.md in one bounded call, for a short lease of a
# GPU machine without loom's build dependencies: unpacks gpu-bundle.tar.xz (scripts/gpu_bundle.sh),
# runs the checks that need no quiet GPU side by side, then the timed ones alone, and packs every
# log into OUT/logs.tgz with a summary in OUT/summary.md.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

usage() {
  cat <<'EOF'
usage: scripts/gpu_lease.sh [--out DIR] [--budget-s N] [--only STAGES]
  --out DIR      where logs.tgz and summary.md go (default bench_results/lease_<date>_<time>)
  --budget-s N   the whole script's wall-clock limit (default 420); every stage is cut to it
  --only STAGES  comma-separated subset of: tests, sanitizer, compare, llmc, bench, layouts,
                 fit, kernels, refs, profile (default: all but profile); a test binary's name or a
                 sanitizer run's name (san_memcheck_train, ...) picks that part alone
Stage A, side by side (correctness, no timing): the cuda tests (none may be skipped), NCCL at world
size 1, compute-sanitizer's four tools, cpu vs cuda losses (fp32 and bf16), the multi-rank layouts
on one GPU (host-staged communicators, 8 ranks) and the memory-fit refusal.
Stage B, alone on the GPU: llm.c's train_gpt2cu on the same GPT-2 124M run when the bundle
carries it (gpu_bundle.sh --llmc; its own kernels, and cuDNN's attention where built), then
scripts/bench_gpu.sh (GPT-2 124M and 350M, bf16, T=1024; 124M again with the step captured as a
CUDA graph; compared with llm.c's best tokens/s), the GEMM algorithm sweep (bench_gemm_algos), PyTorch's
fused attention (scripts/bench_attention_ref.py), loom's own kernels against their rooflines
(bench_kernel_times), and on request (profile) Nsight Compute's per-kernel time and DRAM traffic
of GPT-2 124M (scripts/ncu_summary.py; slow: under ncu step 1 took 98 s on an H100).
EOF
}

OUT="" BUDGET=420 ONLY="tests,sanitizer,compare,llmc,bench,layouts,fit,kernels,refs"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --budget-s) BUDGET="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_lease.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n "$OUT" ]] || OUT="bench_results/lease_$(date +%Y%m%d_%H%M%S)"
want() {  # want STAGE [PART]: the stage, or only that part of it, was asked for
  [[ ",$ONLY," == *",$1,"* || ( -n "${2:-}" && ",$ONLY," == *",$2,"* ) ]]
}
L=$(mktemp -d /tmp/loom_lease.XXXXXX)
mkdir -p "$OUT"
SUM="$L/summary.md"
echo "# GPU lease $(date -u +%Y-%m-%dT%H:%MZ), loom $(git rev-parse --short HEAD 2>/dev/null || cat gpu-bundle/COMMIT 2>/dev/null)" >"$SUM"

# Each stage's limit: its own, cut to what is left of the budget minus a reserve for packing.
lim() {
  local left=$((BUDGET - 15 - SECONDS))
  ((left < 5)) && left=5
  echo $(($1 < left ? $1 : left))
}
# bg NAME LIMIT CMD...: runs CMD in the background with its log L/NAME.log and exit code L/NAME.rc.
bg() {
  local name=$1 limit
  limit=$(lim "$2")
  shift 2
  ( t0=$SECONDS; timeout -k 5 "$limit" "$@" >"$L/$name.log" 2>&1; echo "$? $((SECONDS - t0)) $limit" >"$L/$name.rc" ) &
}
pack() {
  cp "$SUM" "$OUT/summary.md"
  tar -C "$L" -czf "$OUT/logs.tgz" . 2>/dev/null
}
trap pack EXIT

# ---- the machine and the bundle ---------------------------------------------------------
{
  date -u
  nvidia-smi -L
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv
  nvcc --version 2>/dev/null | tail -2
  nvidia-smi topo -m
  lscpu | grep -E '^Model name|^CPU\(s\)'
  python3 -c 'import torch; print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version())' 2>&1
  for f in /usr/local/cuda/lib64/libnccl* /usr/local/cuda/lib64/libcublasLt.so.* /usr/local/cuda/lib64/libcudart.so.*; do
    [[ -e $f ]] && basename "$f"
  done
} >"$L/machine.txt" 2>&1
head -4 "$L/machine.txt" | sed 's/^/    /' >>"$SUM"
[[ -d gpu-bundle ]] || tar xf gpu-bundle.tar.xz || { echo "no gpu-bundle.tar.xz" | tee -a "$SUM"; exit 1; }
B=gpu-bundle/bin
MPIRUN=gpu-bundle/ompi/bin/mpirun  # the bundle's Open MPI, whatever the machine has
# The test binaries look for configs and fixtures under the source folder they were built in.
src_dir=$(cat gpu-bundle/SOURCE_DIR 2>/dev/null || true)
if [[ -n "$src_dir" && "$src_dir" != "$PWD" && ! -e "$src_dir" ]]; then
  mkdir -p "$(dirname "$src_dir")" && ln -s "$PWD" "$src_dir"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=2 GTEST_COLOR=no
python3 scripts/make_random_dataset.py --output-prefix data/bench/random_257 --vocab 257 >/dev/null
python3 scripts/make_random_dataset.py --output-prefix data/bench/random_50257_4m --tokens 4194304 \
  --docs 64 --llmc-shard data/bench/random_50257_4m_llmc.bin >/dev/null

# ---- stage A: correctness, side by side ---------------------------------------------------
for t in test_cuda_kernels test_cuda_backend test_cuda_train test_nccl_comm; do
  want tests "$t" && bg "$t" 150 "$B/$t"
done
want tests test_nccl_p2p_mpi && bg test_nccl_p2p_mpi 90 "$MPIRUN" -np 2 "$B/test_nccl_p2p_mpi"
san() {  # san PART TOOL BINARY GTEST_FILTER [TOOL OPTIONS]: compute-sanitizer on a test binary
  local part=$1 tool=$2 bin=$3 filter=$4
  shift 4
  want sanitizer "$part" &&
    bg "$part" 120 compute-sanitizer --tool "$tool" --error-exitcode 7 "$@" "$B/$bin" --gtest_filter="$filter"
}
san san_memcheck_kernels memcheck test_cuda_kernels '*'
san san_memcheck_backend memcheck test_cuda_backend '*'
# NCCL asks for the attributes of kernels built for other GPUs at set-up (cudaFuncGetAttributes
# answers cudaErrorNoKernelImageForDevice, which NCCL expects): API errors are not reported here.
san san_memcheck_train memcheck test_cuda_train '*' --report-api-errors no
san san_racecheck_attention racecheck test_cuda_kernels '*Attention*'
san san_racecheck_kernels racecheck test_cuda_kernels '-*Attention*'
san san_synccheck_kernels synccheck test_cuda_kernels '*'
# cuBLASLt's Hopper kernels write their output with the bulk-copy (TMA) engine and read operands
# with warpgroup MMA; initcheck tracks those only when asked to (else every GEMM output reads as
# uninitialized when copied back).
san san_initcheck_kernels initcheck test_cuda_kernels '*' --check-bulk-copy yes --check-warpgroup-mma yes
san san_initcheck_nolowp initcheck test_cuda_kernels '-*Lowp*:*bf16*:*fp16*' --check-bulk-copy yes --check-warpgroup-mma yes
san san_initcheck_backend initcheck test_cuda_backend '*' --check-bulk-copy yes --check-warpgroup-mma yes
if want compare; then
  cmp_run() {  # cmp_run NAME DEVICE DTYPE: a small GPT-2 (head size 64) for 20 steps
    "$B/loom" train configs/tiny.yaml --set device="$2" --set train.dtype="$3" --set model.n_head=2 \
      --set model.d_model=128 --set model.seq_len=64 --set data.train=[data/bench/random_257] \
      --set data.valid=[] --set train.steps=20 --set checkpoint.resume=none --set run.dir="$L/$1"
  }
  export -f cmp_run
  export B L
  bg compare 150 bash -c 'cmp_run cmp_cpu cpu fp32 && cmp_run cmp_cuda_fp32 cuda fp32 && cmp_run cmp_cuda_bf16 cuda bf16'
fi
if want layouts; then
  bg layouts_mpi 150 env OMP_NUM_THREADS=1 LOOM_DEVICE_COMM=host "$MPIRUN" -np 8 "$B/test_cuda_layouts_mpi"
fi
if want fit; then
  bg fit 60 "$B/loom" train configs/gpt2_124m.yaml --set device=cuda --set train.dtype=bf16 \
    --set model.n_layer=48 --set model.n_head=25 --set model.d_model=1600 \
    --set parallel.micro_batch_size=64 --set train.global_batch_size=64 \
    --set data.train=[data/bench/random_50257_4m] --set data.valid=[] --set train.eval_interval=0 \
    --set run.dir="$L/fit"
fi
wait
{
  echo
  echo "## Stage A: correctness"
  echo "| check | exit | seconds (limit) | gtest / sanitizer summary |"
  echo "|---|---|---|---|"
  for f in "$L"/*.rc; do
    [[ -e "$f" ]] || continue
    n=$(basename "$f" .rc)
    read -r rc secs limit <"$f"
    p=$(grep -c '^\[       OK \]' "$L/$n.log")
    fl=$(grep -c '^\[  FAILED  \] [A-Za-z]' "$L/$n.log")
    sk=$(grep -c '^\[  SKIPPED \] [A-Za-z]' "$L/$n.log")
    san=$(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$L/$n.log" | sed 's/=========//')
    echo "| $n | $rc | $secs ($limit) | $p passed, $fl failed, $sk skipped. $san |"
  done
} >>"$SUM"
grep -h '^\[  FAILED  \] [A-Za-z]' "$L"/test_*.log 2>/dev/null | sort -u | head -40 | sed 's/^/    /' >>"$SUM"
if want compare && [[ -f "$L/cmp_cpu/metrics.jsonl" ]]; then
  python3 - "$L" >>"$SUM" 2>&1 <<'PY'
import json, sys
L = sys.argv[1]
def losses(run):
    try:
        return {d["step"]: d["loss"] for d in map(json.loads, open(f"{L}/{run}/metrics.jsonl")) if "loss" in d and "step" in d}
    except OSError:
        return {}
c, f, b = losses("cmp_cpu"), losses("cmp_cuda_fp32"), losses("cmp_cuda_bf16")
print("\n## cpu vs cuda losses (GPT-2 L2 H2 C128 T64, 20 steps)\n| step | cpu fp32 | cuda fp32 | rel | cuda bf16 | rel |\n|--:|--:|--:|--:|--:|--:|")
mf = mb = 0.0
for s in sorted(c):
    x, y, z = c[s], f.get(s), b.get(s)
    rf = abs(y - x) / abs(x) if y is not None else float("nan")
    rb = abs(z - x) / abs(x) if z is not None else float("nan")
    mf, mb = max(mf, rf), max(mb, rb)
    print(f"| {s} | {x:.6f} | {y if y is None else f'{y:.6f}'} | {rf:.2e} | {z if z is None else f'{z:.6f}'} | {rb:.2e} |")
print(f"largest relative difference: fp32 {mf:.2e}, bf16 {mb:.2e}")
PY
fi
cp "$SUM" "$OUT/summary.md"

# ---- stage B: timings, alone on the GPU ---------------------------------------------------
echo -e "\n## Stage B: speed, alone on the GPU" >>"$SUM"
LLMC_TPS=""
if want llmc && [[ -d gpu-bundle/llmc ]]; then
  # llm.c trains GPT-2 124M from random weights (d12) on the same tokens as bench_gpu.sh's loom
  # runs, with the same shape: micro-batch 16 x 1024, 65,536 tokens per step, no recompute, fp32
  # master weights; steps 11-30 timed as loom's are. Its cuDNN build needs the machine's libcudnn
  # (a toolkit folder, or PyTorch's nvidia-cudnn wheel).
  llmc_libs=""
  for d in $(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null) \
           /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu; do
    [[ -d "$d" ]] && llmc_libs="$llmc_libs:$d"
  done
  echo -e "\n### llm.c train_gpt2cu, GPT-2 124M, bf16, 16 x 1024 x 4 per step (llm.c $(cut -c1-12 gpu-bundle/llmc/COMMIT))" >>"$SUM"
  echo "| build | exit | median step ms (steps 11-30) | tokens/s |" >>"$SUM"
  echo "|---|---|--:|--:|" >>"$SUM"
  root=$PWD shard=$PWD/data/bench/random_50257_4m_llmc.bin
  for v in train_gpt2cu train_gpt2cu_cudnn; do
    [[ -x gpu-bundle/llmc/$v ]] || continue
    (cd "$L" && LD_LIBRARY_PATH="${llmc_libs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout -k 5 "$(lim 90)" \
      "$root/gpu-bundle/llmc/$v" -i "$shard" -j "$shard" -e d12 -b 16 -t 1024 -d 65536 -x 30 \
      -r 0 -z 0 -w 1 -v 1000 -m 1 -s 0 -h 0 -l 3e-4) >"$L/llmc_$v.log" 2>&1
    rc=$?
    tps=$(python3 - "$L/llmc_$v.log" <<'PY'
import re, statistics, sys
ms = {int(m.group(1)): float(m.group(2)) for m in
      (re.match(r"step\s+(\d+)/\d+ \|.*\| ([0-9.]+) ms \|", l) for l in open(sys.argv[1], errors="replace")) if m}
steps = [ms[s] for s in range(11, 31) if s in ms]
print(f"{statistics.median(steps):.2f} {65536 / statistics.median(steps) * 1e3:.0f}" if len(steps) == 20 else "- -")
PY
)
    echo "| $v | $rc | ${tps% *} | ${tps#* } |" >>"$SUM"
    t=${tps#* }
    [[ $t =~ ^[0-9]+$ ]] && { [[ -z $LLMC_TPS ]] || ((t > LLMC_TPS)); } && LLMC_TPS=$t
  done
fi
if want bench; then
  for mode in plain graph; do
    extra=(--configs "124m 350m")
    [[ $mode == graph ]] && extra=(--configs 124m --cuda-graph)
    [[ -n $LLMC_TPS ]] && extra+=(--llmc-tps "$LLMC_TPS")
    timeout -k 5 "$(lim 120)" scripts/bench_gpu.sh --build gpu-bundle --no-checks \
      --out "$L/bench_$mode" "${extra[@]}" >"$L/bench_$mode.log" 2>&1
    echo -e "\nbench_gpu.sh ($mode) exit $?" >>"$SUM"
    sed -n '/^| config/,$p' "$L/bench_$mode.log" >>"$SUM"
    grep -m3 -E "error|fail" "$L/bench_$mode.log" | sed 's/^/    /' >>"$SUM"
  done
fi
if want kernels; then
  # loom's own kernels at the shapes of one micro-batch of each benchmark model, against rooflines.
  timeout -k 5 "$(lim 60)" "$B/bench_kernel_times" 16 1024 768 12 50304 >"$L/kernel_times_124m.log" 2>&1
  echo -e "\n### loom's kernels, GPT-2 124M micro-batch (exit $?)" >>"$SUM"
  cat "$L/kernel_times_124m.log" >>"$SUM"
  timeout -k 5 "$(lim 60)" "$B/bench_kernel_times" 8 1024 1024 16 50304 >"$L/kernel_times_350m.log" 2>&1
  echo -e "\n### loom's kernels, GPT-2 350M micro-batch (exit $?)" >>"$SUM"
  cat "$L/kernel_times_350m.log" >>"$SUM"
fi
if want refs; then
  timeout -k 5 "$(lim 60)" "$B/bench_gemm_algos" >"$L/gemm_algos.log" 2>&1
  echo -e "\n### cuBLASLt: the heuristic's first algorithm against the fastest of its list (exit $?)" >>"$SUM"
  cat "$L/gemm_algos.log" >>"$SUM"
  timeout -k 5 "$(lim 60)" python3 scripts/bench_attention_ref.py >"$L/attention_ref.log" 2>&1
  echo -e "\n### PyTorch fused attention, bf16 causal (exit $?)" >>"$SUM"
  cat "$L/attention_ref.log" >>"$SUM"
fi
if want profile; then
  # Per launch: GPU time and DRAM bytes; launches of steps 2-3 of a 3-step run (one micro-batch of
  # 16 x 1024 tokens per step; step 1 makes the GEMM plans).
  timeout -k 5 "$(lim 120)" ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    --csv --print-units base --launch-skip 700 --launch-count 900 --log-file "$L/ncu.csv" \
    "$B/loom" train configs/gpt2_124m.yaml --set device=cuda --set train.dtype=bf16 \
    --set parallel.micro_batch_size=16 --set train.global_batch_size=16 --set train.steps=3 \
    --set train.eval_interval=0 --set data.train=[data/bench/random_50257_4m] --set data.valid=[] \
    --set checkpoint.save_interval=0 --set checkpoint.resume=none --set run.dir="$L/profile_run" >"$L/profile.log" 2>&1
  echo -e "\nncu exit $?" >>"$SUM"
  python3 scripts/ncu_summary.py "$L/ncu.csv" >>"$SUM" 2>&1
fi
cp "$SUM" "$OUT/summary.md"

cat "$SUM"
