#!/usr/bin/env bash
# gpu_bundle.sh: packs a CUDA build of loom with everything it needs but the GPU's own CUDA
# libraries into one folder (and a .tar.xz of it), for a GPU machine that has the NVIDIA driver
# and the CUDA toolkit but not loom's build dependencies (MPI, HDF5, OpenBLAS, ICU, yaml-cpp).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF'
usage: scripts/gpu_bundle.sh [--build DIR] [--out DIR] [--max-mib N] [--verify]
                             [--llmc SRC [--cudnn-frontend INC]]
Collects from DIR (default build, configured with nvcc: LOOM_CUDA=ON or AUTO with nvcc found):
  bin/      loom and the cuda test binaries, each a wrapper that runs the real binary (real/)
            through the bundled dynamic loader with only the bundle's libraries and the GPU
            machine's CUDA libraries (libcudart, libcublasLt, libnccl; never carried: the
            machine's own match its driver)
  lib/      every other shared library they load (ldd), the C/C++ runtime included, and the
            loader itself, so the host's glibc version does not matter
  ompi/     Open MPI's runtime (plugins, help texts, orted, mpirun), relocated by OPAL_PREFIX;
  pmix2/    PMIx's plugins, relocated by PMIX_INSTALL_PREFIX
  env.sh    sourced by the wrappers: LD paths, OPAL_PREFIX, PATH
and writes DIR.tar.xz beside --out (default gpu-bundle/ and gpu-bundle.tar.xz), refusing one
larger than --max-mib (default 60: a device call carries at most 64 MiB).
--verify: then proves the bundle stands alone here (root): in a private mount namespace every
  system copy of a library it carries, Open MPI's and PMIx's folders and orted are hidden, and
  the bundled loom trains 3 steps (cpu backend) and each test binary lists its tests.
--llmc SRC: also builds llm.c's train_gpt2cu from the llm.c source tree SRC (karpathy/llm.c;
  not part of loom) for sm_90, bf16, one GPU, into llmc/train_gpt2cu, and with
  --cudnn-frontend INC (the include folder of NVIDIA's cudnn-frontend) a second one with cuDNN's
  fused attention, llmc/train_gpt2cu_cudnn: the comparison scripts/gpu_lease.sh runs. They use
  the GPU machine's CUDA libraries, cuDNN included, through its own loader.
On the GPU machine: tar xf gpu-bundle.tar.xz && gpu-bundle/bin/loom train CONFIG ...
EOF
}

BUILD=build OUT=gpu-bundle MAX_MIB=60 VERIFY=0 LLMC="" CUDNN_FE=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --llmc) LLMC="$2"; shift 2 ;;
    --cudnn-frontend) CUDNN_FE="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --max-mib) MAX_MIB="$2"; shift 2 ;;
    --verify) VERIFY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_bundle.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
fail() { echo "gpu_bundle.sh: $*" >&2; exit 1; }

if [[ -n "$LLMC" ]]; then
  [[ -f "$LLMC/train_gpt2.cu" && -f "$LLMC/Makefile" ]] ||
    fail "--llmc $LLMC: no train_gpt2.cu and Makefile there; give the root of an llm.c source tree"
fi
if [[ -n "$CUDNN_FE" ]]; then
  [[ -n "$LLMC" ]] || fail "--cudnn-frontend is for the llm.c build: give --llmc SRC as well"
  [[ -f "$CUDNN_FE/cudnn_frontend.h" ]] ||
    fail "--cudnn-frontend $CUDNN_FE: no cudnn_frontend.h there; give cudnn-frontend's include folder"
fi
[[ -f "$BUILD/CMakeCache.txt" ]] || fail "$BUILD is not a CMake build folder; build with ./scripts/build.sh first"
# The CUDA language is enabled only when nvcc compiles the cuda sources (not OFF, not EMULATE).
if ! grep -q '^CMAKE_CUDA_FLAGS:' "$BUILD/CMakeCache.txt" ||
  grep -q '^LOOM_CUDA:STRING=EMULATE' "$BUILD/CMakeCache.txt"; then
  fail "$BUILD does not compile the cuda sources with nvcc; configure it with -DLOOM_CUDA=ON"
fi
BINS=(bin/loom tests/test_cuda_kernels tests/test_cuda_backend tests/test_cuda_train
      tests/test_nccl_comm tests/test_nccl_p2p_mpi tests/test_cuda_layouts_mpi
      tests/test_cublas_loading bin/bench_gemm_algos bin/bench_kernel_times)
echo "building ${BINS[*]##*/} in $BUILD ..."
targets=()
for b in "${BINS[@]}"; do targets+=(--target "$(basename "$b")"); done
cmake --build "$BUILD" -j"$(nproc)" "${targets[@]}" >/dev/null
for b in "${BINS[@]}"; do [[ -x "$BUILD/$b" ]] || fail "$BUILD/$b is missing after the build"; done

rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/real" "$OUT/lib" "$OUT/ompi"
# CUDA's libraries come from the GPU machine: its toolkit and driver agree with each other.
is_cuda_lib() { [[ "$(basename "$1")" =~ ^lib(cuda|cudart|cublas|cublasLt|nccl|nvidia-ml)\. ]]; }

copy_deps() {  # copy_deps FILE: every shared library FILE loads (transitively, by ldd)
  ldd "$1" | awk '/=> \//{print $3} /^\t\/lib64\//{print $1}' | while read -r lib; do
    is_cuda_lib "$lib" && continue
    [[ -e "$OUT/lib/$(basename "$lib")" ]] || cp -L "$lib" "$OUT/lib/"
  done
}

for b in "${BINS[@]}"; do
  name=$(basename "$b")
  cp "$BUILD/$b" "$OUT/real/$name"
  strip --strip-unneeded "$OUT/real/$name" 2>/dev/null || true
  copy_deps "$BUILD/$b"
done
loader=$(ldd "$BUILD/bin/loom" | awk '/ld-linux/{print $1}')
cp -L "$loader" "$OUT/lib/ld-linux-x86-64.so.2"

# Open MPI: its prefix layout (Debian's paths below /usr), relocated with OPAL_PREFIX.
OMPI_LIB=/usr/lib/x86_64-linux-gnu/openmpi/lib
[[ -d "$OMPI_LIB/openmpi3" ]] || fail "Open MPI's plugins are not in $OMPI_LIB/openmpi3 (apt-get install libopenmpi-dev)"
mkdir -p "$OUT/ompi/lib/x86_64-linux-gnu/openmpi/lib" "$OUT/ompi/bin" "$OUT/ompi/share"
cp -a "$OMPI_LIB/openmpi3" "$OUT/ompi/lib/x86_64-linux-gnu/openmpi/lib/"
cp -a /usr/share/openmpi "$OUT/ompi/share/"
for f in "$OUT"/ompi/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so; do copy_deps "$f"; done
for tool in orted orterun; do
  cp -L "/usr/bin/$tool" "$OUT/ompi/bin/$tool.real"
  copy_deps "/usr/bin/$tool"
done
# PMIx (Open MPI's process-management library) finds its plugins and help texts below its own
# prefix, relocated by PMIX_INSTALL_PREFIX.
PMIX=/usr/lib/x86_64-linux-gnu/pmix2
if [[ -d "$PMIX/lib/pmix" ]]; then
  mkdir -p "$OUT/pmix2/lib"
  cp -a "$PMIX/lib/pmix" "$OUT/pmix2/lib/"
  cp -a "$PMIX/share" "$OUT/pmix2/"
  for f in "$OUT"/pmix2/lib/pmix/*.so; do copy_deps "$f"; done
fi
mkdir -p "$OUT/hwloc"  # no hwloc plugins: the machine's GPU/GL/OpenCL probes are not needed

cat >"$OUT/env.sh" <<'EOF'
# Sourced by the bundle's wrappers: the bundle's libraries, then the GPU machine's CUDA ones.
B="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cuda_dirs=""
# NCCL from a Python wheel (nvidia-nccl) first: wheels are built for old glibc versions, while a
# system libnccl (seen: Ubuntu 24.04's, in /usr/lib/x86_64-linux-gnu) may need a newer glibc
# than the bundle's own (Debian 12: 2.36) and then fails to load.
for d in $(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null); do
  cuda_dirs="$cuda_dirs:$d"
done
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
         /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu; do
  [[ -d "$d" ]] && cuda_dirs="$cuda_dirs:$d"
done
export LOOM_BUNDLE_LIBS="$B/lib$cuda_dirs"
export OPAL_PREFIX="$B/ompi" PMIX_INSTALL_PREFIX="$B/pmix2" HWLOC_PLUGINS_PATH="$B/hwloc"
export PMIX_MCA_mca_base_component_path="$B/pmix2/lib/pmix"  # PMIx's plugins (not relocated)
export PATH="$B/ompi/bin:$B/bin:$PATH"
export OMPI_MCA_plm_rsh_agent=false  # one machine: no ssh
# The bundle's OpenBLAS (0.3.21) falls back to its slow generic kernels on CPUs newer than it;
# loom re-executes itself to fix that, which it cannot do through the bundled loader.
if [[ -z "${OPENBLAS_CORETYPE:-}" ]]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi
EOF

wrap() {  # wrap NAME REAL UP: a script that runs REAL through the bundled loader; UP: the
  # path from the script's folder to the bundle's root
  cat >"$1" <<EOF
#!/usr/bin/env bash
# Runs the bundled $(basename "$2") with the bundle's libraries (scripts/gpu_bundle.sh).
B="\$(cd "\$(dirname "\${BASH_SOURCE[0]}")/$3" && pwd)"
source "\$B/env.sh"
exec "\$B/lib/ld-linux-x86-64.so.2" --library-path "\$LOOM_BUNDLE_LIBS" "\$B/$2" "\$@"
EOF
  chmod +x "$1"
}
for b in "${BINS[@]}"; do wrap "$OUT/bin/$(basename "$b")" "real/$(basename "$b")" ..; done
for tool in orted orterun; do wrap "$OUT/ompi/bin/$tool" "ompi/bin/$tool.real" ../..; done
ln -s orterun "$OUT/ompi/bin/mpirun"
git rev-parse --short HEAD >"$OUT/COMMIT" 2>/dev/null || echo unknown >"$OUT/COMMIT"
if [[ -n "$LLMC" ]]; then
  # llm.c, built in a copy of its tree: one GPU (no NCCL, no MPI), bf16, Hopper. CUDA 13 dropped
  # the integer-device overload of cudaMemAdvise that llm.c's fallback to managed memory calls;
  # the copy passes the host as a cudaMemLocation instead (the same request). nvrtc and the
  # driver API are what newer cudnn-frontend versions link against.
  llmc_tmp=$(mktemp -d /tmp/loom_llmc.XXXXXX)
  cp -r "$LLMC"/. "$llmc_tmp"
  sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
    "$llmc_tmp/llmc/cuda_utils.cuh"
  mkdir -p "$OUT/llmc"
  llmc_make() {  # llmc_make USE_CUDNN NAME: builds train_gpt2cu and keeps it as llmc/NAME
    local ld="-lcublas -lcublasLt"
    [[ $1 == 1 ]] && ld="$ld -lcudnn -lnvrtc -L$CUDA_HOME/lib64/stubs -lcuda"
    (cd "$llmc_tmp" && rm -rf build train_gpt2cu && PATH="$CUDA_HOME/bin:$PATH" make train_gpt2cu \
      NO_MULTI_GPU=1 NO_USE_MPI=1 USE_CUDNN="$1" GPU_COMPUTE_CAPABILITY=90 PRECISION=BF16 \
      NVCC_LDFLAGS="$ld") >"$OUT/llmc/$2.build.log" 2>&1 ||
      { tail -5 "$OUT/llmc/$2.build.log" >&2; fail "llm.c's $2 did not build ($OUT/llmc/$2.build.log)"; }
    cp "$llmc_tmp/train_gpt2cu" "$OUT/llmc/$2"
  }
  CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
  llmc_make 0 train_gpt2cu
  if [[ -n "$CUDNN_FE" ]]; then
    mkdir -p "$llmc_tmp/cudnn-frontend" && cp -r "$CUDNN_FE" "$llmc_tmp/cudnn-frontend/include"
    llmc_make 1 train_gpt2cu_cudnn
  fi
  (git -C "$LLMC" rev-parse HEAD 2>/dev/null || echo "not a git checkout") >"$OUT/llmc/COMMIT"
  rm -rf "$llmc_tmp"
fi
# The test binaries read configs and fixtures below the source folder they were built from.
sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD/CMakeCache.txt" >"$OUT/SOURCE_DIR"

XZ_OPT="-T0" tar -C "$(dirname "$OUT")" -cJf "$OUT.tar.xz" "$(basename "$OUT")"
mib=$(( $(stat -c %s "$OUT.tar.xz") / 1048576 ))
echo "bundle: $OUT ($(du -sh "$OUT" | cut -f1) unpacked), $OUT.tar.xz ($mib MiB), loom $(cat "$OUT/COMMIT")"
(( mib <= MAX_MIB )) || fail "$OUT.tar.xz is $mib MiB, more than --max-mib $MAX_MIB"

[[ $VERIFY == 1 ]] || exit 0
# ---- verify: the bundle with the system's copies hidden ---------------------------------------
command -v unshare >/dev/null || fail "--verify needs unshare (util-linux) and root"
data=data/bench/random_257
[[ -f $data.bin ]] || python3 scripts/make_random_dataset.py --output-prefix "$data" --vocab 257 >/dev/null
hide=""
for lib in "$OUT"/lib/*; do
  name=$(basename "$lib")
  case "$name" in ld-linux*|libc.so.*|libm.so.*|libtinfo.so.*|libdl.so.*|libpthread.so.*) continue ;; esac
  for dir in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu; do
    [[ -e "$dir/$name" ]] && hide="$hide $dir/$name"
  done
done
rm -rf runs/bundle_verify
# shellcheck disable=SC2016
unshare --mount bash -c '
  set -e
  for f in $0; do mount --bind /dev/null "$f"; done
  for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 \
           /usr/lib/x86_64-linux-gnu/hwloc /usr/share/openmpi; do
    [[ -d $d ]] && mount -t tmpfs none "$d"
  done
  for f in /usr/bin/orted /usr/bin/orterun; do [[ -e $f ]] && mount --bind /dev/null "$f"; done
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
  "$1/bin/loom" train configs/tiny.yaml --set device=cpu --set "data.train=[$2]" \
    --set "data.valid=[]" --set train.steps=3 --set train.eval_interval=0 \
    --set checkpoint.save_interval=0 --set checkpoint.resume=none --set run.dir=runs/bundle_verify
  for t in "$1"/bin/test_*; do "$t" --gtest_list_tests >/dev/null; done
  # cuBLAS is loaded with dlopen on first use (kernels/cublas_api.cuh): through the bundled
  # loader its search path must reach the CUDA libraries of the machine (no GPU needed).
  "$1/bin/test_cublas_loading"
' "$hide" "$OUT" "$data" >"$OUT.verify.log" 2>&1 ||
  { tail -20 "$OUT.verify.log" >&2; fail "the bundle does not stand alone (log above, $OUT.verify.log)"; }
grep -q '"step": *3' runs/bundle_verify/metrics.jsonl ||
  fail "the bundled loom did not reach step 3 ($OUT.verify.log)"
echo "verified: with $(echo "$hide" | wc -w) system libraries, Open MPI, PMIx and orted hidden," \
  "the bundled loom trained 3 steps, every test binary loaded and cuBLAS was found ($OUT.verify.log)"
