// Internal to the emulated cuBLASLt subset: descriptor contents and the GEMM it computes.
#pragma once
#include <cublasLt.h>

#include <cstdint>

namespace loom_emu::rt {

struct LtDesc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
};

struct LtLayout {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};

struct LtPref {
  uint64_t max_workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D (the documented defaults)
};

// D (m x n, column-major) = epilogue(alpha op(A) op(B) + beta C), everything validated.
struct LtProblem {
  const LtDesc* desc;
  const LtLayout *a, *b, *c, *d;
  uint64_t m, n, k;
  float alpha, beta;
  const void *A, *B, *C;
  void* D;
};

size_t type_bytes(cudaDataType t);
void run_gemm(const LtProblem& p);  // gemm.cpp

}  // namespace loom_emu::rt
