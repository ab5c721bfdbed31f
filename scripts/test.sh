#!/usr/bin/env bash
# Installs what is missing, builds, fetches the GPT-2 tokenizer files, and runs the whole ctest
# suite (labels unit, mpi, cuda; cuda tests skip without a GPU). Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
./scripts/get_gpt2_tokenizer.sh
# Oversubscribed MPI tests need one OpenMP thread per rank; mpirun may run as root in CI.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir build --output-on-failure -j2 "$@"
