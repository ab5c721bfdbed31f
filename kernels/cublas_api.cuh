// The cuBLAS and cuBLASLt entry points loom calls, loaded on first use rather than at start-up.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>

namespace loom::cuda {

// Why not link them: loading libcublasLt runs its initialisers, which take about 0.4 s and map
// about 210 MB in every process, a cpu-backend run and each test binary included. Linked only
// against the CUDA runtime, a process pays that the first time a cuda GEMM handle is made.
// Each member has the type and the name of the library function it holds (cublas_v2.h maps
// cublasCreate to cublasCreate_v2, so those members carry the suffix and call sites may omit it).
#define LOOM_CUBLASLT_FUNCTIONS(X)        \
  X(cublasLtCreate)                       \
  X(cublasLtDestroy)                      \
  X(cublasLtGetStatusName)                \
  X(cublasLtGetStatusString)              \
  X(cublasLtMatmul)                       \
  X(cublasLtMatmulAlgoGetHeuristic)       \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)
#define LOOM_CUBLAS_FUNCTIONS(X) \
  X(cublasCreate_v2)             \
  X(cublasDestroy_v2)            \
  X(cublasGemmGroupedBatchedEx)  \
  X(cublasSetStream_v2)

#define LOOM_CUBLAS_API_MEMBER(f) decltype(&::f) f = nullptr;
struct CublasLtApi {
  LOOM_CUBLASLT_FUNCTIONS(LOOM_CUBLAS_API_MEMBER)
};
struct CublasApi {
  LOOM_CUBLAS_FUNCTIONS(LOOM_CUBLAS_API_MEMBER)
};
#undef LOOM_CUBLAS_API_MEMBER

// The libraries' functions, loaded once (thread-safe) by the first call. A library or symbol
// that cannot be loaded throws CudaError naming the file, the loader's message and the fix. In
// the CPU emulation build these are the emulator's own functions.
const CublasLtApi& cublaslt();
const CublasApi& cublas();

namespace detail {
// dlopen(soname), then LOOM_CUDA_LIBRARY_DIR/soname; a library found in neither throws CudaError
// naming both attempts and the fix. The emulation build opens nothing (nullptr): the emulator
// defines the functions itself.
void* open_library(const char* soname);
}  // namespace detail

}  // namespace loom::cuda
