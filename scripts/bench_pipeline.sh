#!/usr/bin/env bash
# bench_pipeline.sh: pipeline bubble of `loom train` with 1F1B vs interleaved 1F1B (virtual stages).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF2'
usage: scripts/bench_pipeline.sh [--build DIR] [--cases "pp4v1m4 pp4v2m4 ..."] [--steps S]
                                 [--runs R] [-- EXTRA --set ARGS...]
Runs `loom train` (GPT-2 8L 4H C256, vocab 512, T64, micro-batches of 1 sequence) on a
random-token dataset for each case ppPvVmM (P stages, V virtual stages, M micro-batches per
step) and prints the pipeline wait of the log's time breakdown (time blocked in pipeline
receives: bubble + transfer, mean over ranks and steps) as a share of the step, beside the
ideal bubble (P-1)/(V*M+P-1) of equal stages with free transfers.
  default cases: pp4v1m4 pp4v2m4 pp4v1m8 pp4v2m8 pp2v1m4 pp2v2m4 pp2v4m4
  --runs R  runs per case (default 2; the median is printed); --steps S (default 12)
With more ranks than cores the ranks are oversubscribed (MPI yields while it waits): a rank's
wait then partly overlaps other ranks' compute on the shared cores, so the measured wait is a
lower-bound-ish indication of the bubble, not a dedicated-core figure.
EOF2
}

BUILD=build CASES="pp4v1m4 pp4v2m4 pp4v1m8 pp4v2m8 pp2v1m4 pp2v2m4 pp2v4m4" STEPS=12 RUNS=2 EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --cases) CASES="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_pipeline.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

LOOM="$BUILD/bin/loom"
[[ -x "$LOOM" ]] || { echo "bench_pipeline.sh: $LOOM is missing: cmake --build $BUILD --target loom" >&2; exit 1; }
if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_rmaps_base_oversubscribe=1
CORES=$(nproc)
DATA=data/bench/random_512
if [[ ! -f $DATA.bin ]]; then
  python3 scripts/make_random_dataset.py --output-prefix "$DATA" --vocab 512 --tokens 262144 >/dev/null
fi

# The model and run; each case sets the layout on the command line.
CONFIG=runs/bench_pipeline.yaml
mkdir -p runs
cat >"$CONFIG" <<EOF2
run: {name: bench_pipeline}
model: {n_layer: 8, n_head: 4, d_model: 256, vocab_size: 512, seq_len: 64, dropout: 0}
train: {steps: $STEPS, seed: 1234, log_interval: 1, eval_interval: 0, dtype: fp32}
optimizer: {lr: 6.0e-4, warmup_steps: 0, schedule: constant}
data: {train: [$DATA], valid: [], shuffle: false}
checkpoint: {save_interval: 0, resume: none}
device: cpu
EOF2

median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# run PP V M DIR: prints "step_ms pp_wait_percent" from the run's log.
run() {
  local pp=$1 v=$2 m=$3 dir=$4 threads
  threads=$(( pp >= CORES ? 1 : CORES / pp ))
  rm -rf "$dir"
  OMP_NUM_THREADS=$threads mpirun -np "$pp" --bind-to none -x OMP_NUM_THREADS "$LOOM" train \
    "$CONFIG" --set "run.dir=$dir" --set parallel.pp="$pp" --set parallel.virtual_stages="$v" \
    --set parallel.micro_batch_size=1 --set train.global_batch_size="$m" "${EXTRA[@]}" \
    >"$dir.log" 2>&1 || { echo "bench_pipeline.sh: loom failed, see $dir.log" >&2; tail -5 "$dir.log" >&2; return 1; }
  local ms pct
  ms=$(grep -o 'time per step (mean over ranks): [0-9.]* ms' "$dir.log" | grep -o '[0-9.]* ms' | tr -dc '0-9.')
  pct=$(grep -o 'measured pp wait [0-9.]*%' "$dir.log" | tr -dc '0-9.')
  echo "$ms $pct"
}

echo "machine: $CORES cores, load average $(cut -d' ' -f1-3 /proc/loadavg); $RUNS runs x $STEPS steps per case"
printf '%-10s %4s %3s %4s | %9s | %12s | %9s\n' case pp v m "step ms" "pp wait %" "ideal %"
for c in $CASES; do
  pp=$(sed -E 's/pp([0-9]+)v([0-9]+)m([0-9]+)/\1/' <<<"$c")
  v=$(sed -E 's/pp([0-9]+)v([0-9]+)m([0-9]+)/\2/' <<<"$c")
  m=$(sed -E 's/pp([0-9]+)v([0-9]+)m([0-9]+)/\3/' <<<"$c")
  mss=() pcts=()
  for ((r = 0; r < RUNS; r++)); do
    run "$pp" "$v" "$m" "runs/bench_pipeline_$c" >runs/bench_pipeline.out || exit 1
    read -r ms pct <runs/bench_pipeline.out
    mss+=("$ms") pcts+=("$pct")
  done
  printf '%-10s %4s %3s %4s | %9.1f | %12.1f | %9.1f\n' "$c" "$pp" "$v" "$m" \
    "$(printf '%s\n' "${mss[@]}" | median)" "$(printf '%s\n' "${pcts[@]}" | median)" \
    "$(awk -v p="$pp" -v v="$v" -v m="$m" 'BEGIN {print 100 * (p - 1) / (v * m + p - 1)}')"
  rm -rf runs/bench_pipeline_"$c" runs/bench_pipeline_"$c".log
done
echo "pp wait: share of the step spent blocked in pipeline receives (bubble + transfer), mean over"
echo "ranks (the log's time breakdown); ideal: (pp-1)/(v*m+pp-1) for equal stages and free transfers."
