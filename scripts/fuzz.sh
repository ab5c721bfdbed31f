#!/usr/bin/env bash
# Builds loom's libFuzzer targets (clang, AddressSanitizer + UndefinedBehaviorSanitizer, cpu only)
# into build-fuzz/ and runs them on a corpus seeded from the repository's own files.
#
#   scripts/fuzz.sh --ci                 every CI target for a bounded number of runs (a few minutes)
#   scripts/fuzz.sh --time 600 config    one target for 10 minutes (by hand)
#   scripts/fuzz.sh --runs 200000        every CI target for 200000 runs each
#   scripts/fuzz.sh --time 300 hdf5_raw  raw-byte HDF5 fuzzing (not in CI: it tests libhdf5 itself)
#
# The corpus grows in build-fuzz/corpus/<target>/. A crash, a hang (over -timeout seconds), an
# allocation over the memory limits or a leak is written to build-fuzz/findings/<target>/ and
# the script exits 1. Fix the bug, then copy the input to tests/fuzz/regressions/<target>/,
# where the unit test test_fuzz_regressions replays it in the ordinary build.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
BUILD="$ROOT/build-fuzz"
CI_TARGETS=(mmidx safetensors checkpoint hdf5_weights config tokenizer)
# Per target: runs in --ci (about 20-40 s each here) and the largest input tried (the seeds fit).
declare -A CI_RUNS=([mmidx]=6000 [safetensors]=5000 [checkpoint]=300 [hdf5_weights]=600
                    [config]=5000 [tokenizer]=6000 [hdf5_raw]=2000)
declare -A MAX_LEN=([mmidx]=4096 [safetensors]=131072 [checkpoint]=16384 [hdf5_weights]=1024
                    [config]=8192 [tokenizer]=8192 [hdf5_raw]=262144)
CI=0 RUNS="" TIME="" SEED=0 TARGETS=()
while (($#)); do
  case "$1" in
    --ci) CI=1 TIME=120 SEED=1 ;;  # fixed seed and runs: the same inputs each time
    --runs) RUNS="$2"; shift ;;
    --time) TIME="$2"; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) TARGETS+=("$1") ;;
  esac
  shift
done
if [[ $CI == 0 && -z "$RUNS" && -z "$TIME" ]]; then
  echo "fuzz.sh: give --ci, --runs N or --time SECONDS (see --help)" >&2
  exit 2
fi
((${#TARGETS[@]})) || TARGETS=("${CI_TARGETS[@]}")

CLANG=$(command -v clang++-14 || command -v clang++ || true)
if [[ -z "$CLANG" ]]; then
  echo "fuzz.sh: clang++ not found: run scripts/setup.sh (it installs clang and libFuzzer)" >&2
  exit 1
fi
start=$SECONDS
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$CLANG" -DCMAKE_C_COMPILER="${CLANG/clang++/clang}" \
  -DLOOM_CUDA=OFF -DLOOM_TESTS=OFF -DLOOM_FUZZ=ON >/dev/null
JOBS=${LOOM_BUILD_JOBS:-$(nproc)}
cmake --build "$BUILD" -j"$JOBS" --target loom_fuzz_seeds $(printf 'fuzz_%s ' "${TARGETS[@]}") \
  | grep -v '^\[' || true
echo "fuzz.sh: built in $((SECONDS - start)) s"

export TMPDIR="$BUILD/tmp"  # the targets' scratch files
rm -rf "$TMPDIR" "$BUILD/seeds" && mkdir -p "$TMPDIR"
"$BUILD/fuzz/loom_fuzz_seeds" "$BUILD/seeds" "$ROOT"
# Suppress nothing; leaks count as findings. UBSan stops at the first report. A small
# quarantine: libhdf5 allocates megabytes per file, and fresh pages would dominate the time.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:quarantine_size_mb=16}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=()
for t in "${TARGETS[@]}"; do
  corpus="$BUILD/corpus/$t" findings="$BUILD/findings/$t"
  mkdir -p "$corpus" "$findings"
  dirs=("$corpus" "$BUILD/seeds/$t")
  [[ -d "$ROOT/tests/fuzz/regressions/$t" ]] && dirs+=("$ROOT/tests/fuzz/regressions/$t")
  args=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1
        -max_len="${MAX_LEN[$t]}" -artifact_prefix="$findings/" -seed="$SEED")
  if [[ $CI == 1 ]]; then args+=(-runs="${CI_RUNS[$t]}"); fi
  [[ -n "$RUNS" ]] && args+=(-runs="$RUNS")
  [[ -n "$TIME" ]] && args+=(-max_total_time="$TIME")
  # hdf5_raw hands any bytes to libhdf5, which allocates sizes read from the file and reports
  # a failed allocation as an error (so a too-large request returns NULL here), and which leaks
  # on some error paths of its object-header cache (libhdf5 1.10.8): no leak check there.
  # loom's HDF5 code is leak-checked by hdf5_weights and checkpoint, and all three check that
  # no HDF5 object is left open after an input.
  asan=$ASAN_OPTIONS
  [[ $t == hdf5_raw ]] && asan+=":allocator_may_return_null=1:detect_leaks=0"
  t0=$SECONDS
  log="$BUILD/findings/$t.log"
  if ASAN_OPTIONS=$asan "$BUILD/fuzz/fuzz_$t" "${args[@]}" "${dirs[@]}" >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
    echo "fuzz.sh: $t: $runs runs in $((SECONDS - t0)) s, $cov, corpus $(ls "$corpus" | wc -l) files: clean"
  else
    echo "fuzz.sh: $t: FAILED after $((SECONDS - t0)) s; the input is in $findings/, the log is $log:"
    grep -E 'ERROR|SUMMARY|terminate|what\(\)|property|Test unit written' "$log" | head -8 | sed 's/^/  /'
    failed+=("$t")
  fi
done
rm -rf "$TMPDIR"
echo "fuzz.sh: total $((SECONDS - start)) s"
if ((${#failed[@]})); then
  echo "fuzz.sh: findings in: ${failed[*]}" >&2
  exit 1
fi
