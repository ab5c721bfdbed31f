#!/usr/bin/env bash
# gpu_checks.sh: the checks on a GPU machine before the benchmarks: the cuda tests (none may be
# skipped), compute-sanitizer's four tools, and a per-kernel time summary of a few training
# steps. Each stage has a time limit; results go to OUT/checks.md. Called by bench_gpu.sh.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

usage() {
  cat <<'EOF'
usage: scripts/gpu_checks.sh --bin DIR --loom LOOM [--out DIR] [--emulated] [--budget-s N]
  --bin DIR   folder with test_cuda_kernels, test_cuda_backend, test_cuda_train (a build's tests/,
              or a bundle's bin/ from scripts/gpu_bundle.sh)
  --loom L    the loom binary (or bundle wrapper) for the profile of a few steps
  --out DIR   logs and checks.md (default bench_results/checks_<date>_<time>)
  --emulated  the binaries are the CPU execution mode's (LOOM_CUDA=EMULATE): the tests run, the
              GPU tools are reported as not applicable
  --budget-s  the whole script's limit (default 330 s, so that a 10-minute device call also has
              time for the benchmarks); each stage gets at most its own limit and what is left
Stages and limits: tests 120 s each; memcheck 90 s (kernels) and 60 s (backend); racecheck
(attention and reduction tests), synccheck, initcheck 60 s each (test_cuda_kernels); profile 60 s.
A stage cut short by its limit is reported as such, not as a failure.
EOF
}

BIN="" LOOM="" OUT="" EMU=0 BUDGET=330
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) BIN="$2"; shift 2 ;;
    --loom) LOOM="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --emulated) EMU=1; shift ;;
    --budget-s) BUDGET="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_checks.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n "$BIN" && -n "$LOOM" ]] || { usage >&2; exit 2; }
[[ -n "$OUT" ]] || OUT="bench_results/checks_$(date +%Y%m%d_%H%M%S)"
mkdir -p "$OUT"
if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
TESTS=(test_cuda_kernels test_cuda_backend test_cuda_train)
lim() {  # lim SECONDS: the stage's limit, cut to what is left of the budget (at least 1)
  local left=$((BUDGET - SECONDS))
  (( left < 1 )) && left=1
  echo $(( $1 < left ? $1 : left ))
}
status=0
row() { echo "| $1 | $2 | $3 |" >>"$OUT/checks.md"; }
{
  echo "| stage | result | seconds |"
  echo "|---|---|---|"
} >"$OUT/checks.md"

# gtest's summary lines of a log: "N passed, F failed, S skipped".
counts() {
  local p f s
  p=$(grep -c '^\[       OK \]' "$1")
  f=$(grep -c '^\[  FAILED  \] [A-Za-z]' "$1")
  s=$(grep -c '^\[  SKIPPED \] [A-Za-z]' "$1")
  echo "$p passed, $f failed, $s skipped"
  [[ $f == 0 && $s == 0 && $p -gt 0 ]]
}

# 1. The cuda tests: on a GPU machine a skip means the process saw no GPU, which is a failure.
for t in "${TESTS[@]}"; do
  [[ -x "$BIN/$t" ]] || { row "$t" "missing in $BIN" 0; status=1; continue; }
  t0=$SECONDS
  timeout "$(lim 120)" "$BIN/$t" >"$OUT/$t.log" 2>&1
  rc=$?
  res=$(counts "$OUT/$t.log") || status=1
  (( rc == 0 )) || { res="$res; exit $rc"; status=1; }
  row "$t" "$res" $((SECONDS - t0))
done

# 2. compute-sanitizer (the device tools exist only with a GPU).
if [[ $EMU == 1 ]]; then
  row "compute-sanitizer" "not applicable in the CPU execution mode (its own race and bounds checks ran above)" 0
elif ! command -v compute-sanitizer >/dev/null; then
  row "compute-sanitizer" "not found on PATH" 0
  status=1
else
  san() {  # san TOOL LIMIT BINARY [gtest filter]
    local tool=$1 limit bin=$3 filter=${4:-*} t0=$SECONDS
    limit=$(lim "$2")
    timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 7 "$BIN/$bin" \
      --gtest_filter="$filter" >"$OUT/sanitizer_${tool}_$bin.log" 2>&1
    local rc=$? res
    case $rc in
      0) res="clean" ;;
      7) res="ERRORS (see sanitizer_${tool}_$bin.log)"; status=1 ;;
      124) res="stopped at the ${limit} s limit (partial log kept)" ;;
      *) res="exit $rc (see the log)"; status=1 ;;
    esac
    row "compute-sanitizer $tool $bin ($filter)" "$res" $((SECONDS - t0))
  }
  san memcheck 90 test_cuda_kernels
  san memcheck 60 test_cuda_backend
  san racecheck 60 test_cuda_kernels '*Attention*:*Reduction*:*ColSums*'
  san synccheck 60 test_cuda_kernels
  san initcheck 60 test_cuda_kernels
fi

# 3. Per-kernel GPU time of steps 3-4 of GPT-2 124M (bf16, micro-batch 16): Nsight Systems when
# it works, else Nsight Compute's duration of each launch.
if [[ $EMU == 1 ]]; then
  row "kernel profile" "not applicable in the CPU execution mode" 0
else
  t0=$SECONDS
  args=(train configs/gpt2_124m.yaml --set device=cuda --set train.dtype=bf16
        --set parallel.micro_batch_size=16 --set train.global_batch_size=16 --set train.steps=4
        --set train.eval_interval=0 --set "data.train=[data/bench/random_50257_4m]"
        --set "data.valid=[]" --set checkpoint.save_interval=0 --set checkpoint.resume=none
        --set run.dir="$OUT/profile_run")
  if command -v nsys >/dev/null && timeout "$(lim 60)" nsys profile -t cuda -o "$OUT/profile" "$LOOM" "${args[@]}" \
      >"$OUT/profile.log" 2>&1 && nsys stats -r cuda_gpu_kern_sum "$OUT/profile.nsys-rep" \
      >"$OUT/kernels.txt" 2>&1; then
    row "kernel profile (nsys)" "kernels.txt" $((SECONDS - t0))
  elif command -v ncu >/dev/null; then
    # One metric (one replay pass per kernel); the launches of steps 3 and 4 only.
    timeout "$(lim 60)" ncu --metrics gpu__time_duration.sum --csv --launch-skip 1500 --launch-count 1500 \
      "$LOOM" "${args[@]}" >"$OUT/ncu.csv" 2>"$OUT/profile.log"
    rc=$?
    python3 - "$OUT/ncu.csv" >"$OUT/kernels.txt" 2>>"$OUT/profile.log" <<'PY'
import collections, csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, body = rows[0], rows[1:]
k, m, v = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
tot, cnt = collections.Counter(), collections.Counter()
for r in body:
    if r[m] == "gpu__time_duration.sum":
        tot[r[k][:90]] += float(r[v].replace(",", "")) / 1e3  # ns -> us
        cnt[r[k][:90]] += 1
all_us = sum(tot.values())
print(f"{'us':>10} {'share':>6} {'launches':>8}  kernel")
for name, us in tot.most_common():
    print(f"{us:10.1f} {100 * us / all_us:5.1f}% {cnt[name]:8d}  {name}")
PY
    row "kernel profile (ncu, launches 1500-3000)" "kernels.txt (exit $rc)" $((SECONDS - t0))
  else
    row "kernel profile" "neither nsys nor ncu found" 0
  fi
fi
cat "$OUT/checks.md"
exit $status
