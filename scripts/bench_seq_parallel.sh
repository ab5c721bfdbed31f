#!/usr/bin/env bash
# bench_seq_parallel.sh: what sequence parallelism and context parallelism change in a cpu run
# of `loom train`: activation memory per rank (the start-up memory report), step time and the
# time blocked in tensor-parallel and context-parallel communication (metrics.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF'
usage: scripts/bench_seq_parallel.sh [--build DIR] [--steps S] [sp|cp|long]...
  sp    GPT-2 4 layers, 4 heads, d_model 256, T 256, micro-batch 4 on tp2, with and without
        parallel.sequence_parallel (2 ranks)
  cp    GPT-2 2 layers, 2 heads, d_model 64 at T 8192: one rank against cp2 (2 ranks)
  long  the same model at T 32768 on cp2: the cpu attention of one rank would keep the
        (heads, T, T) probabilities (8 GiB a layer); the ring keeps row statistics only
Default: sp cp. Each case prints the rank's activations (MiB), the median step time and the
median time blocked in tp / cp communication over steps 2..S (default S = 4).
EOF
}

BUILD=build STEPS=4 CASES=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    sp|cp|long) CASES+=("$1"); shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_seq_parallel.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
((${#CASES[@]})) || CASES=(sp cp)
LOOM="$BUILD/bin/loom"
[[ -x "$LOOM" ]] || { echo "bench_seq_parallel.sh: $LOOM is missing: ./scripts/build.sh" >&2; exit 1; }
if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_rmaps_base_oversubscribe=1
DATA=data/bench/random_257_long
[[ -f $DATA.bin ]] ||
  python3 scripts/make_random_dataset.py --output-prefix "$DATA" --vocab 257 --tokens 1048576 \
    --docs 8 >/dev/null

# run NAME RANKS --set ...: trains S steps and prints one result line.
run() {
  local name=$1 ranks=$2 dir="runs/bench_seq_$1"
  shift 2
  rm -rf "$dir"
  local threads=$(( $(nproc) / ranks ))
  ((threads >= 1)) || threads=1
  OMP_NUM_THREADS=$threads mpirun -np "$ranks" --bind-to none -x OMP_NUM_THREADS "$LOOM" train \
    configs/tiny.yaml --set "run.dir=$dir" --set "data.train=[$DATA]" --set data.valid=[] \
    --set train.steps="$STEPS" --set train.log_interval=1 --set train.eval_interval=0 \
    --set checkpoint.save_interval=0 --set checkpoint.resume=none --set optimizer.warmup_steps=0 \
    "$@" >"$dir.log" 2>&1 || { echo "bench_seq_parallel.sh: $name failed, see $dir.log" >&2; tail -5 "$dir.log" >&2; return 1; }
  local act
  act=$(grep -o 'activations [0-9.]* / [0-9.]*' "$dir.log" | head -1 | awk '{print $4}')
  python3 - "$dir/metrics.jsonl" "$name" "$ranks" "$act" <<'PY'
import json, statistics, sys
path, name, ranks, act = sys.argv[1:5]
steps = [json.loads(l) for l in open(path)]
steps = [d for d in steps if "step_ms" in d and d["step"] > 1]
med = lambda k: statistics.median(d["time"].get(k, 0.0) for d in steps)
print(f"| {name} | {ranks} | {act} | {statistics.median(d['step_ms'] for d in steps):.1f} "
      f"| {med('tp_comm'):.1f} | {med('cp_comm') if 'cp_comm' in steps[0]['time'] else 0.0:.1f} |")
PY
}

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); steps 2-$STEPS"
echo "| case | ranks | activations MiB (rank 0) | step ms | tp comm ms | cp comm ms |"
echo "|---|--:|--:|--:|--:|--:|"
gpt_sp=(--set model.n_layer=4 --set model.n_head=4 --set model.d_model=256 --set model.seq_len=256
        --set model.max_positions=256 --set parallel.micro_batch_size=4 --set train.global_batch_size=4)
gpt_cp=(--set model.n_layer=2 --set model.n_head=2 --set model.d_model=64
        --set parallel.micro_batch_size=1 --set train.global_batch_size=1)
for c in "${CASES[@]}"; do
  case $c in
    sp)
      run "tp2" 2 "${gpt_sp[@]}" --set parallel.tp=2
      run "tp2 + SP" 2 "${gpt_sp[@]}" --set parallel.tp=2 --set parallel.sequence_parallel=true ;;
    cp)
      run "T 8192, one rank" 1 "${gpt_cp[@]}" --set model.seq_len=8192 --set model.max_positions=8192
      run "T 8192, cp2" 2 "${gpt_cp[@]}" --set model.seq_len=8192 --set model.max_positions=8192 \
        --set parallel.cp=2 ;;
    long)
      run "T 32768, cp2" 2 "${gpt_cp[@]}" --set model.seq_len=32768 --set model.max_positions=32768 \
        --set parallel.cp=2 ;;
  esac
done
