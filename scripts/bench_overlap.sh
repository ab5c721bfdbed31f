#!/usr/bin/env bash
# bench_overlap.sh: step time of `loom train` with parallel.overlap off vs on, per layout and ZeRO stage.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF'
usage: scripts/bench_overlap.sh [--build DIR] [--layouts "dp2 dp2xpp2"] [--zero "0 2 3"]
                                [--config a|b] [--runs R] [--steps S] [--no-wait] [--keep]
                                [-- EXTRA --set ARGS...]
Runs `loom train` on a random-token dataset with parallel.overlap false and true, alternating
(off, on, off, on, ...) so that a change in machine load hits both alike, and prints per layout
and ZeRO stage the median step time and the median time blocked in DP communication and in
pipeline receives (metrics.jsonl "time" breakdown, rank 0, steps >= 3), off vs on.
  layouts   dp2 (2 ranks), dp2xpp2 (4 ranks), dp4, pp2, ...: dpAxppBxtpC, missing axes 1
  --config  a: GPT-2 L4 H4 C256 vocab 50257, T64 (configs/bench_cpu.yaml)   [default]
            b: GPT-2 124M (12L 12H 768C vocab 50257), T128
  --runs R  runs per setting (default 3); --steps S steps per run (default 12)
  global batch: 4 sequences per DP rank and micro-batches of 1, so every rank runs 4 (x pp)
  micro-batches; one OpenMP thread per rank when ranks >= cores, else cores/ranks.
EOF
}

BUILD=build LAYOUTS="dp2 dp2xpp2" ZERO="0 2 3" CONFIG=a RUNS=3 STEPS=12 WAIT=1 KEEP=0 EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --layouts) LAYOUTS="$2"; shift 2 ;;
    --zero) ZERO="$2"; shift 2 ;;
    --config) CONFIG="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --no-wait) WAIT=0; shift ;;
    --keep) KEEP=1; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_overlap.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

LOOM="$BUILD/bin/loom"
[[ -x "$LOOM" ]] || { echo "bench_overlap.sh: $LOOM is missing: cmake --build $BUILD" >&2; exit 1; }
if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_rmaps_base_oversubscribe=1
CORES=$(nproc)
DATA=data/bench/random_50257
if [[ ! -f $DATA.bin ]]; then python3 scripts/make_random_dataset.py --output-prefix "$DATA" >/dev/null; fi

case "$CONFIG" in
  a) MODEL=(configs/bench_cpu.yaml) ;;
  b) MODEL=(configs/gpt2_124m.yaml --set model.seq_len=128 --set data.valid=[]
            --set train.eval_interval=0) ;;
  *) echo "bench_overlap.sh: unknown config '$CONFIG' (a or b)" >&2; exit 2 ;;
esac

# Waits (up to 5 min) until other processes use under 10% of the CPU time; warns otherwise.
wait_quiet() {
  [[ $WAIT == 1 ]] || return 0
  local t0=$SECONDS a b busy
  while (( SECONDS - t0 < 300 )); do
    a=$(awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat)
    sleep 2
    b=$(awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat)
    busy=$(echo "$a $b" | awk '{d=$4-$2; print (d>0) ? int(100*($3-$1)/d) : 0}')
    (( busy < 10 )) && return 0
    sleep 3
  done
  echo "bench_overlap.sh: warning: the machine stayed busy (other processes); figures are noisy" >&2
}

range() { sort -g | awk 'NR==1 {lo=$1} {hi=$1} END {printf "%.0f-%.0f", lo, hi}'; }
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# axis LAYOUT NAME: the size of one axis of "dp2xpp2xtp1" (1 when absent).
axis() { local v; v=$(grep -o "$2[0-9]*" <<<"$1" | head -1); echo "${v:-${2}1}" | tr -dc 0-9; }

# run LAYOUT ZERO OVERLAP DIR: prints "step_ms dp_comm_ms pp_wait_ms", medians over steps >= 3.
run() {
  local lay=$1 zero=$2 ov=$3 dir=$4
  local dp pp tp ranks threads
  dp=$(axis "$lay" dp) pp=$(axis "$lay" pp) tp=$(axis "$lay" tp)
  ranks=$((dp * pp * tp))
  threads=$(( ranks >= CORES ? 1 : CORES / ranks ))
  rm -rf "$dir"
  OMP_NUM_THREADS=$threads mpirun -np "$ranks" --bind-to none -x OMP_NUM_THREADS "$LOOM" train \
    "${MODEL[@]}" --set "data.train=[$DATA]" --set "run.dir=$dir" --set checkpoint.save_interval=0 \
    --set checkpoint.resume=none --set train.steps="$STEPS" --set train.log_interval=1 \
    --set parallel.dp="$dp" --set parallel.pp="$pp" --set parallel.tp="$tp" \
    --set parallel.micro_batch_size=1 --set train.global_batch_size=$((4 * dp)) \
    --set optimizer.zero_stage="$zero" --set parallel.overlap="$ov" "${EXTRA[@]}" \
    >"$dir.log" 2>&1 || { echo "bench_overlap.sh: loom failed, see $dir.log" >&2; tail -5 "$dir.log" >&2; exit 1; }
  python3 - "$dir/metrics.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in rows if "step_ms" in r and r["step"] >= 3]
med = lambda k: statistics.median(r["time"][k] if k in r["time"] else r[k] for r in rows)
print("%.1f %.1f %.1f" % (statistics.median(r["step_ms"] for r in rows), med("dp_comm"), med("pp_wait")))
EOF
}

mkdir -p runs
echo "machine: $CORES cores, load average $(cut -d' ' -f1-3 /proc/loadavg); config $CONFIG, $RUNS runs x $STEPS steps"
printf '%-10s %-5s | %9s %9s %7s | %11s %11s | %8s %8s | %8s %8s\n' layout zero "off ms" "on ms" \
  "on/off" "off range" "on range" "dp off" "dp on" "pp off" "pp on"
for lay in $LAYOUTS; do
  for zero in $ZERO; do
    offs=() ons=() doff=() don=() poff=() pon=()
    for ((r = 0; r < RUNS; r++)); do
      for ov in false true; do
        wait_quiet
        read -r ms dpc ppw <<<"$(run "$lay" "$zero" "$ov" "runs/bench_overlap_${lay}_z${zero}_$ov")"
        if [[ $ov == false ]]; then offs+=("$ms") doff+=("$dpc") poff+=("$ppw")
        else ons+=("$ms") don+=("$dpc") pon+=("$ppw"); fi
      done
    done
    m_off=$(printf '%s\n' "${offs[@]}" | median) m_on=$(printf '%s\n' "${ons[@]}" | median)
    printf '%-10s %-5s | %9.1f %9.1f %7.3f | %11s %11s | %8.1f %8.1f | %8.1f %8.1f\n' "$lay" \
      "$zero" "$m_off" "$m_on" "$(awk -v a="$m_on" -v b="$m_off" 'BEGIN {print a / b}')" \
      "$(printf '%s\n' "${offs[@]}" | range)" "$(printf '%s\n' "${ons[@]}" | range)" \
      "$(printf '%s\n' "${doff[@]}" | median)" "$(printf '%s\n' "${don[@]}" | median)" \
      "$(printf '%s\n' "${poff[@]}" | median)" "$(printf '%s\n' "${pon[@]}" | median)"
    [[ $KEEP == 1 ]] || rm -rf runs/bench_overlap_"${lay}"_z"${zero}"_*
  done
done
echo "off/on ms: median over runs of each run's median step; range: the runs' medians."
echo "dp/pp: median ms per step rank 0 spent blocked in DP collectives (+ embed) and pipeline receives."
