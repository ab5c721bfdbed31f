#!/usr/bin/env bash
# bench_gpu.sh: one command on a GPU machine: the cuda tests, compute-sanitizer and a kernel profile
# (scripts/gpu_checks.sh), then loom's single-GPU training speed (tokens/s, ms/step, MFU) for
# GPT-2 124M and a larger GPT-2.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF'
usage: scripts/bench_gpu.sh [--configs "124m 350m"] [--steps N] [--warmup W] [--dtype bf16]
                            [--micro-batch B] [--accum A] [--gpu I] [--peak FLOPS]
                            [--llmc-tps TOKENS_PER_S] [--build DIR] [--out DIR] [--cpu-dry-run]
                            [--no-checks] [--cuda-graph]
First the checks (scripts/gpu_checks.sh: the cuda tests, none skipped; compute-sanitizer's
memcheck, racecheck, synccheck and initcheck; a per-kernel profile of two steps), then trains
each config for N steps on one GPU through `loom train` (device: cuda) on random tokens, drops
the first W steps (warm-up), and prints per config the median tokens/s, ms/step and MFU. All in
under 10 minutes on an H100 for the default configs.
  configs  124m: GPT-2 small  (12 layers, 12 heads, d_model  768), T=1024, micro-batch 16 x 4
         350m: GPT-2 medium (24 layers, 16 heads, d_model 1024), T=1024, micro-batch  8 x 8
         774m: GPT-2 large  (36 layers, 20 heads, d_model 1280), T=1024, micro-batch  4 x 16
        1558m: GPT-2 XL     (48 layers, 25 heads, d_model 1600), T=1024, micro-batch  2 x 32
         (micro-batch x accumulation = 64 sequences = 65,536 tokens per optimizer step)
  --steps N        optimizer steps per run (default 30)
  --warmup W       first steps left out of the figures (default 10)
  --dtype D        train.dtype: bf16 (default), fp16 or fp32
  --micro-batch B  override every config's parallel.micro_batch_size
  --accum A        override the micro-batches per step (global batch = B x A)
  --gpu I          which GPU (CUDA_VISIBLE_DEVICES=I; default 0)
  --peak FLOPS     per-GPU peak for MFU (default: the datasheet table below, by GPU name)
  --llmc-tps X     llm.c's tokens/s for GPT-2 124M on the same GPU model, to compare against
  --build DIR      CUDA build folder (default build-cuda; configured with -DLOOM_CUDA=ON and
                   built when loom is missing there), or a bundle from scripts/gpu_bundle.sh
                   (gpu-bundle: for a GPU machine without loom's build dependencies)
  --no-checks      the benchmarks only
  --cuda-graph     train with train.cuda_graph: true (the step captured once, then replayed)
  --out DIR        results folder (default bench_results/gpu_<date>_<time>)
  --cpu-dry-run    check this script on a machine without a GPU: the same steps on loom's cpu
                   backend (fp32) with a tiny model (its figures are not GPU figures), and the
                   cuda tests of build-emu (the CPU execution mode) when it has them
MFU = flops_per_token x tokens_per_s / peak, flops_per_token = 6 x (parameters - position
embeddings) + 12 x n_layer x d_model x seq_len (src/train/flops.cpp, the figure loom logs).
EOF
}

CONFIGS="124m 350m" STEPS=30 WARMUP=10 DTYPE=bf16 MB="" ACCUM="" GPU=0 PEAK="" LLMC_TPS=""
BUILD=build-cuda OUT="" DRY=0 CHECKS=1 GRAPH=false
while [[ $# -gt 0 ]]; do
  case "$1" in
    --configs) CONFIGS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --dtype) DTYPE="$2"; shift 2 ;;
    --micro-batch) MB="$2"; shift 2 ;;
    --accum) ACCUM="$2"; shift 2 ;;
    --gpu) GPU="$2"; shift 2 ;;
    --peak) PEAK="$2"; shift 2 ;;
    --llmc-tps) LLMC_TPS="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --cpu-dry-run) DRY=1; shift ;;
    --no-checks) CHECKS=0; shift ;;
    --cuda-graph) GRAPH=true; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_gpu.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

fail() { echo "bench_gpu.sh: $*" >&2; exit 1; }
is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }
if ! is_uint "$STEPS" || ! is_uint "$WARMUP"; then fail "--steps and --warmup take whole numbers"; fi
(( STEPS >= WARMUP + 3 )) || fail "--steps $STEPS leaves fewer than 3 timed steps after --warmup $WARMUP"
[[ -z "$MB" ]] || is_uint "$MB" || fail "--micro-batch takes a whole number"
[[ -z "$ACCUM" ]] || is_uint "$ACCUM" || fail "--accum takes a whole number"
[[ "$DTYPE" =~ ^(bf16|fp16|fp32)$ ]] || fail "--dtype must be bf16, fp16 or fp32"
command -v python3 >/dev/null || fail "python3 is needed (random tokens and the results table)"

# ---- the GPU ------------------------------------------------------------------------------
DEVICE=cuda
if [[ $DRY == 1 ]]; then
  DEVICE=cpu DTYPE=fp32 BUILD=build GPU_NAME="cpu (dry run)" GPU_MEM="-" DRIVER="-"
  [[ -n "$PEAK" ]] || PEAK=1e11
else
  command -v nvidia-smi >/dev/null ||
    fail "no GPU: nvidia-smi is not installed (no NVIDIA driver on this machine). Run on a machine with an NVIDIA GPU (sm_80 or newer); --cpu-dry-run only checks this script"
  if ! query=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader -i "$GPU" 2>&1) ||
     [[ -z "$query" ]]; then
    fail "no GPU: nvidia-smi found no GPU $GPU: ${query:-no output}"
  fi
  IFS=',' read -r GPU_NAME GPU_MEM DRIVER <<<"$query"
  GPU_NAME=$(echo "$GPU_NAME" | sed 's/^ *//;s/ *$//') GPU_MEM=${GPU_MEM# } DRIVER=${DRIVER# }
  export CUDA_VISIBLE_DEVICES="$GPU"
fi

# The per-GPU dense peak: --peak, else the datasheet table loom uses (src/train/mfu.cpp).
PEAK_SOURCE="--peak"
if [[ -z "$PEAK" ]]; then
  lname=$(echo "$GPU_NAME" | tr '[:upper:]' '[:lower:]')
  half=1; [[ $DTYPE == fp32 ]] && half=0
  case "$lname" in
    *"h100 pcie"*) label="H100 PCIe"; p16=756e12; p32=51e12 ;;
    *"h100 nvl"*) label="H100 NVL"; p16=835e12; p32=60e12 ;;
    *gh200*) label="GH200"; p16=989e12; p32=67e12 ;;
    *h200*) label="H200"; p16=989e12; p32=67e12 ;;
    *h100*) label="H100 SXM"; p16=989e12; p32=67e12 ;;
    *a100*) label="A100"; p16=312e12; p32=19.5e12 ;;
    *) label="" ;;
  esac
  [[ -n "$label" ]] ||
    fail "GPU '$GPU_NAME' is not in the peak table (H100, H200, GH200, A100); give its dense peak with --peak FLOPS"
  if [[ $half == 1 ]]; then PEAK=$p16 PEAK_SOURCE="$label bf16/fp16 dense tensor-core datasheet figure, no 2:4 sparsity; the table of src/train/mfu.cpp"
  else PEAK=$p32 PEAK_SOURCE="$label fp32 datasheet figure; the table of src/train/mfu.cpp"; fi
fi

# ---- build ----------------------------------------------------------------------------------
LOOM="$BUILD/bin/loom"
if [[ ! -x "$LOOM" ]]; then
  if [[ $DRY == 1 ]]; then ./scripts/build.sh >/dev/null
  else
    if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
    command -v nvcc >/dev/null ||
      fail "no nvcc: install the CUDA toolkit (or pass --build DIR of an existing CUDA build or of a bundle from scripts/gpu_bundle.sh)"
    echo "building loom with CUDA into $BUILD ..."
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA=ON >"/tmp/bench_gpu_cmake.$$.log" 2>&1 ||
      { tail -20 "/tmp/bench_gpu_cmake.$$.log" >&2; fail "cmake failed (log above)"; }
    cmake --build "$BUILD" -j"$(nproc)" --target loom
  fi
fi
[[ -x "$LOOM" ]] || fail "$LOOM is missing after the build"
if [[ $DRY == 0 && -f "$BUILD/CMakeCache.txt" ]] && grep -q '^LOOM_CUDA:STRING=OFF' "$BUILD/CMakeCache.txt"; then
  fail "$BUILD was configured with -DLOOM_CUDA=OFF; use --build with a CUDA build (default build-cuda)"
fi

# ---- data and output ----------------------------------------------------------------------
DATA=data/bench/random_50257_4m
if [[ ! -f $DATA.bin || ! -f $DATA.idx ]]; then
  python3 scripts/make_random_dataset.py --output-prefix "$DATA" --tokens 4194304 --docs 64 >/dev/null
fi
[[ -n "$OUT" ]] || OUT="bench_results/gpu_$(date +%Y%m%d_%H%M%S)"
mkdir -p "$OUT"
if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

# ---- checks: tests, compute-sanitizer, kernel profile ---------------------------------------
CHECKS_STATUS=0
if [[ $CHECKS == 1 ]]; then
  if [[ $DRY == 1 ]]; then
    if [[ -x build-emu/tests/test_cuda_kernels ]]; then
      scripts/gpu_checks.sh --bin build-emu/tests --loom "$LOOM" --out "$OUT/checks" --emulated ||
        CHECKS_STATUS=1
    else
      echo "checks: build-emu has no cuda tests (./scripts/test_cuda_emulated.sh builds them); skipped"
    fi
  else
    TBIN="$BUILD/tests"
    [[ -x "$BUILD/bin/test_cuda_kernels" ]] && TBIN="$BUILD/bin"  # a bundle
    scripts/gpu_checks.sh --bin "$TBIN" --loom "$LOOM" --out "$OUT/checks" || CHECKS_STATUS=1
  fi
fi

# name: layers heads d_model seq_len micro-batch accumulation label
shape() {
  if [[ $DRY == 1 ]]; then echo "2 2 128 64 2 2 dry-run-tiny"; return; fi
  case "$1" in
    124m) echo "12 12 768 1024 16 4 GPT-2-124M" ;;
    350m) echo "24 16 1024 1024 8 8 GPT-2-350M" ;;
    774m) echo "36 20 1280 1024 4 16 GPT-2-774M" ;;
    1558m) echo "48 25 1600 1024 2 32 GPT-2-1558M" ;;
    *) fail "unknown config '$1' (124m, 350m, 774m, 1558m)" ;;
  esac
}
for c in $CONFIGS; do shape "$c" >/dev/null; done

{
  if [[ $DRY == 1 ]]; then echo "device: none (--cpu-dry-run: loom's cpu backend, fp32, a tiny model; not GPU figures)"
  else echo "device: $GPU_NAME (GPU $GPU, $GPU_MEM, driver $DRIVER) | loom $(git rev-parse --short HEAD 2>/dev/null || echo '?') | $DTYPE"; fi
  echo "peak: $(awk -v p="$PEAK" 'BEGIN {printf "%.4g TFLOP/s", p / 1e12}') per GPU ($PEAK_SOURCE)"
  echo "MFU = flops_per_token x tokens_per_s / peak"
  echo "flops_per_token = 6 x (parameters - position embeddings) + 12 x n_layer x d_model x seq_len"
  echo "  (loom's formula, src/train/flops.cpp: forward+backward matmuls, tied classifier included,"
  echo "   attention scores and weighted values without subtracting the causal half; recompute not counted)"
  echo "timed: steps $((WARMUP + 1))-$STEPS of $STEPS (the first $WARMUP are warm-up); figures are medians over them"
} | tee "$OUT/header.txt"

# Device memory in use, sampled by nvidia-smi every 0.5 s while a run lasts (all processes on
# the GPU: run on an otherwise idle GPU).
SMI_PID=""
start_mem_sampler() {
  [[ $DRY == 0 ]] || return 0
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "$GPU" -lms 500 >"$1" 2>/dev/null &
  SMI_PID=$!
}
stop_mem_sampler() {
  if [[ -n "$SMI_PID" ]]; then
    kill "$SMI_PID" 2>/dev/null || true
    { wait "$SMI_PID"; } 2>/dev/null || true
    SMI_PID=""
  fi
}
trap stop_mem_sampler EXIT

status=0
: >"$OUT/rows.tsv"
for c in $CONFIGS; do
  read -r L H C T B A LABEL <<<"$(shape "$c")"
  [[ -z "$MB" ]] || B=$MB
  [[ -z "$ACCUM" ]] || A=$ACCUM
  dir="$OUT/$c"
  rm -rf "$dir"
  args=(train configs/gpt2_124m.yaml --set "device=$DEVICE" --set "train.dtype=$DTYPE"
        --set "model.n_layer=$L" --set "model.n_head=$H" --set "model.d_model=$C"
        --set "model.seq_len=$T" --set "model.max_positions=$T"
        --set parallel.tp=1 --set parallel.pp=1 --set parallel.dp=1
        --set "parallel.micro_batch_size=$B" --set "train.global_batch_size=$((B * A))"
        --set "train.steps=$STEPS" --set train.log_interval=1 --set train.eval_interval=0
        --set "data.train=[$DATA]" --set "data.valid=[]" --set checkpoint.save_interval=0
        --set checkpoint.resume=none --set "run.name=bench_gpu_$c" --set "run.dir=$dir"
        --set optimizer.warmup_steps=0 --set optimizer.schedule=constant)
  [[ $GRAPH == false ]] || args+=(--set train.cuda_graph=true)
  [[ "$PEAK_SOURCE" != "--peak" ]] || args+=(--set "log.peak_flops=$PEAK")
  echo "$c: $LOOM ${args[*]}" >>"$OUT/commands.txt"
  echo "running $c ($LABEL, micro-batch $B x $A per step, $STEPS steps) ..."
  start_mem_sampler "$dir.mem"
  rc=0
  "$LOOM" "${args[@]}" >"$dir.log" 2>&1 || rc=$?
  stop_mem_sampler
  if (( rc != 0 )); then
    if grep -q "device memory:" "$dir.log"; then
      echo "bench_gpu.sh: $c does not fit on this GPU (loom's estimate; full log $dir.log):" >&2
      sed -n '/device memory:/,$p' "$dir.log" | head -20 >&2
      printf '%s\t%s\tno-fit\n' "$c" "$LABEL" >>"$OUT/rows.tsv"
      status=1
      continue
    fi
    errline=$(grep -m1 "error:" "$dir.log" || true)
    if [[ "$errline" == *cuda* || "$errline" == *CUDA* ]]; then
      fail "loom cannot use the GPU; it says: ${errline#*error: } (full log $dir.log)"
    fi
    tail -15 "$dir.log" >&2
    fail "loom failed on $c (log above, full log $dir.log)"
  fi
  grep -m1 -E "peak for MFU|MFU not reported|cpu peak" "$dir.log" | sed "s/^/  loom: /" || true
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$LABEL" "$L" "$H" "$C" "$T" "$B" "$A" \
    "$dir/metrics.jsonl" "$dir.mem" >>"$OUT/rows.tsv"
done

python3 - "$OUT" "$WARMUP" "$PEAK" "${LLMC_TPS:-}" "$DRY" <<'PY'
import json, statistics, sys
out, warmup, peak, llmc_tps, dry = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"

def params(L, C, T, V):
    # GPT-2 with tied embeddings: wte V x C, wpe T x C, per block 12C^2 + 13C, final LayerNorm 2C.
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C

def loom_fpt(L, C, T):  # src/train/flops.cpp: 6 x (params - positions) + 12 L C T
    return 6 * (params(L, C, T, 50257) - T * C) + 12 * L * C * T

def llmc_fpt(L, C, T):  # llm.c's gpt2_estimate_mfu: 6 x params (vocab padded to 50304) + 6 L C T
    return 6 * params(L, C, T, 50304) + 6 * L * C * T

rows, results = [], []
for line in open(f"{out}/rows.tsv"):
    f = line.rstrip("\n").split("\t")
    if f[2] == "no-fit":
        results.append({"config": f[0], "model": f[1], "fits": False})
        continue
    name, label = f[0], f[1]
    L, H, C, T, B, A = map(int, f[2:8])
    steps = []
    for l in open(f[8]):
        d = json.loads(l)
        if "tokens_per_s" in d and "step" in d and d["step"] > warmup:
            steps.append(d)
    if len(steps) < 3:
        sys.exit(f"bench_gpu.sh: {name}: only {len(steps)} logged steps after warm-up in {f[8]}")
    tps = statistics.median(d["tokens_per_s"] for d in steps)
    ms = statistics.median(d["step_ms"] for d in steps)
    loom_mfu = [d["mfu"] for d in steps if d.get("mfu") is not None]
    mem = max(d.get("mem_peak_bytes") or 0 for d in steps)
    smi = None  # largest nvidia-smi memory.used sample (MiB) during the run
    try:
        vals = [float(x) for x in open(f[9]) if x.strip().replace(".", "", 1).isdigit()]
        smi = max(vals) * 2**20 if vals else None
    except OSError:
        pass
    fpt = loom_fpt(L, C, T)
    r = {"config": name, "model": label, "fits": True, "n_layer": L, "n_head": H, "d_model": C,
         "seq_len": T, "micro_batch": B, "accum": A, "tokens_per_step": B * A * T,
         "timed_steps": len(steps), "tokens_per_s": tps, "step_ms": ms,
         "tokens_per_s_min": min(d["tokens_per_s"] for d in steps),
         "tokens_per_s_max": max(d["tokens_per_s"] for d in steps),
         "flops_per_token": fpt, "mfu": fpt * tps / peak,
         "loom_logged_mfu": statistics.median(loom_mfu) if loom_mfu else None,
         "llmc_formula_mfu": llmc_fpt(L, C, T) * tps / peak, "mem_peak_bytes": mem,
         "gpu_mem_used_max_bytes": smi}
    results.append(r)

hdr = ("| config | tokens/step | tokens/s (min-max) | ms/step | flops/token | MFU | loom-logged MFU "
       "| MFU by llm.c's formula | mem_peak_bytes | GPU memory used (nvidia-smi max) |")
lines = [hdr, "|" + "---|" * 10]
for r in results:
    if not r["fits"]:
        lines.append(f"| {r['model']} | does not fit (loom's device-memory check) | | | | | | | | |")
        continue
    lm = "n/a" if r["loom_logged_mfu"] is None else f"{100 * r['loom_logged_mfu']:.1f}%"
    g = r["gpu_mem_used_max_bytes"]
    smi_s = "-" if g is None else f"{g / 2**30:.2f} GiB"
    lines.append(
        f"| {r['model']} T{r['seq_len']} mb{r['micro_batch']}x{r['accum']} | {r['tokens_per_step']:,} "
        f"| {r['tokens_per_s']:,.0f} ({r['tokens_per_s_min']:,.0f}-{r['tokens_per_s_max']:,.0f}) "
        f"| {r['step_ms']:.1f} | {r['flops_per_token'] / 1e6:,.0f}M | {100 * r['mfu']:.1f}% | {lm} "
        f"| {100 * r['llmc_formula_mfu']:.1f}% | {r['mem_peak_bytes'] / 2**30:.2f} GiB | {smi_s} |")
print()
print("\n".join(lines))
notes = []
small = next((r for r in results if r.get("config") == "124m" and r["fits"]), None)
if small and not dry:
    ok = small["mfu"] > 0.45
    notes.append(f"target: GPT-2 124M at T=1024 above 45% MFU on one H100 in bf16: "
                 f"{100 * small['mfu']:.1f}% -> {'MET' if ok else 'NOT MET'}")
    if llmc_tps:
        ratio = small["tokens_per_s"] / float(llmc_tps)
        notes.append(f"llm.c reference (--llmc-tps): {float(llmc_tps):,.0f} tokens/s; loom/llm.c = "
                     f"{ratio:.2f}x -> {'faster' if ratio > 1 else 'NOT faster'} than llm.c")
    else:
        notes.append("llm.c reference: not given; pass --llmc-tps with llm.c's tokens/s for GPT-2 "
                     "124M on the same GPU model (TODO in docs/gpu.md: llm.c's published figure)")
notes.append("MFU by llm.c's formula = (6 x parameters with vocab 50304 + 6 x L x C x T) x tokens/s / "
             "peak, for comparing with the MFU llm.c prints")
for n in notes:
    print(n)
with open(f"{out}/results.json", "w") as fh:
    json.dump({"peak": peak, "warmup_steps": warmup, "results": results, "notes": notes}, fh, indent=1)
with open(f"{out}/results.md", "w") as fh:
    fh.write(open(f"{out}/header.txt").read() + "\n" + "\n".join(lines) + "\n\n" + "\n".join(notes) + "\n")
PY
echo "results: $OUT/results.md, $OUT/results.json (logs and metrics.jsonl per config under $OUT)"
if [[ $CHECKS == 1 && $CHECKS_STATUS != 0 ]]; then
  echo "bench_gpu.sh: some checks failed: $OUT/checks/checks.md" >&2
  status=1
fi
exit $status
