#!/usr/bin/env bash
# Builds loom with AddressSanitizer + UndefinedBehaviorSanitizer into build-asan/ and runs the
# tests there; fails on any failing test and on any sanitizer report, from any process.
#
# usage: scripts/sanitize.sh [--unit] [ctest arguments...]
#   (default)  build everything, run the unit and mpi labels
#   --unit     build only what the unit label needs, run the unit label (the CI variant)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build="$root/build-asan"

labels="unit|mpi"
targets=()
if [[ "${1:-}" == "--unit" ]]; then
  shift
  labels="unit"
  targets=(--target loom_unit_tests)
fi

./scripts/setup.sh
./scripts/get_gpt2_tokenizer.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_CUDA=OFF \
  -DLOOM_SANITIZE=ON >/dev/null
cmake --build "$build" -j"$(nproc)" "${targets[@]}"

# Every report goes to its own file (reports/<tool>.<pid>), so that a report from a process
# whose exit status a test ignores (an expected failure in a shell test) still fails the run.
reports="$build/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
supp="$root/scripts/sanitize"
# halt_on_error/abort_on_error: the first error ends the process with a failing status.
# detect_leaks: LeakSanitizer at exit, with suppressions for libraries outside loom only.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:fast_unwind_on_malloc=0:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:log_path=$reports/asan"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:log_path=$reports/ubsan"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

status=0
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" -L "$labels" "$@" || status=$?

shopt -s nullglob
found=("$reports"/*)
if ((${#found[@]} > 0)); then
  echo "sanitize: ${#found[@]} sanitizer report(s):"
  for f in "${found[@]}"; do
    echo "===== $f"
    cat "$f"
  done
  status=1
fi
if ((status == 0)); then
  echo "sanitize: clean (labels $labels)"
fi
exit "$status"
