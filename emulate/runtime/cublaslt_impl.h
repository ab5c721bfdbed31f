// Internal to the emulated cuBLASLt subset: descriptor contents and the GEMM it computes.
#pragma once
#include <cublasLt.h>

#include <cstddef>
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

// A validated cublasLtMatmul call as a graph node keeps it: copies of the descriptors, the
// scalars (host pointer mode: read at the call), the operands and the algorithm's promised
// alignments (log2 per A, B, C, D).
struct LtCall {
  LtDesc desc;
  LtLayout a, b, c, d;
  uint64_t m, n, k;
  float alpha, beta;
  const void *A, *B, *C;
  void* D;
  uint8_t al[4];
  void* ws;
  size_t ws_bytes;
};
// cublaslt_call.cpp: faults on an operand beyond its allocation or less aligned than promised,
// then run_gemm.
void execute(const LtCall& call);
uint32_t alignment_of(const void* p);  // the largest power of two (<= 256) dividing p
// The bytes a column-major (rows, cols, ld) matrix spans.
size_t span(uint64_t rows, uint64_t cols, int64_t ld, cudaDataType t);

}  // namespace loom_emu::rt
