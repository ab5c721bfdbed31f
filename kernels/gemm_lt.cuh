// cuBLASLt GEMMs of the cuda twins: one row-major call, run on the handle's cached plan.
#pragma once
#include <cstdint>

#include "kernels/cublas_api.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/matmul.h"

namespace loom::cuda {

// One row-major GEMM: C (M, N) = alpha op(A) op(B) + beta C [+ epilogue].
struct Call {
  cudaDataType_t ab_type, cd_type;
  bool ta, tb;
  int M, N, K;
  float alpha;
  const void* A;
  int lda;
  const void* B;
  int ldb;
  float beta;
  void* C;
  int ldc;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // (N) of cd_type, broadcast over rows
  void* aux = nullptr;         // GELU input (M, N), leading dimension aux_ld
  int64_t aux_ld = 0;
};

// Runs c on the handle's plan for its key (built on the key's first call). Returns false when
// cuBLASLt has no algorithm for the combination (epilogue, alignment); the caller falls back.
bool lt_matmul(GemmHandle& h, const Call& c, cudaStream_t stream);

}  // namespace loom::cuda
