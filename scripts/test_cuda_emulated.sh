#!/usr/bin/env bash
# The cuda tests without a GPU: builds the CPU emulation of the cuda sources (LOOM_CUDA=EMULATE,
# docs/cuda.md) into build-emu and runs every test labelled cuda there (none may skip), the
# multi-rank cuda layouts through the host-staged device communicators among them.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${LOOM_EMU_BUILD_DIR:-build-emu}"
JOBS="${LOOM_JOBS:-2}"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA=EMULATE >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target test_cuda_kernels test_cuda_backend test_cuda_train \
  test_emulator test_host_staged_comm_mpi test_cuda_layouts_mpi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# A skipped cuda test would mean the emulated device was not found: that is a failure here.
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
ctest --test-dir "$BUILD" -L cuda -j "$JOBS" --output-on-failure | tee "$out"
if grep -qE "\*\*\*Skipped|Not Run" "$out"; then
  echo "test_cuda_emulated: cuda tests were skipped in the emulation build" >&2
  exit 1
fi
