// The arithmetic of the emulated cuBLASLt matmul: column-major operands with leading dimensions,
// transposes, fp32 compute (TF32 rounding of the inputs when asked), bias and GELU epilogues.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "cublaslt_impl.h"
#include "state.h"

namespace loom_emu::rt {
namespace {

float load(cudaDataType t, const void* base, size_t i) {
  switch (t) {
    case CUDA_R_32F:
      return static_cast<const float*>(base)[i];
    case CUDA_R_16BF:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default:
      return __half2float(static_cast<const __half*>(base)[i]);  // CUDA_R_16F
  }
}

void store(cudaDataType t, void* base, size_t i, float v) {
  switch (t) {
    case CUDA_R_32F:
      static_cast<float*>(base)[i] = v;
      break;
    case CUDA_R_16BF:
      static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v);
      break;
    default:
      static_cast<__half*>(base)[i] = __float2half_rn(v);
      break;
  }
}

// fp32 -> TF32 (10 mantissa bits), round to nearest with ties away from zero, as the tensor
// cores' input conversion.
float to_tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// GELU, tanh form (what loom's cpu twin computes; cuBLASLt documents only "GELU").
float gelu(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(u));
}

}  // namespace

size_t type_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

void run_gemm(const LtProblem& p) {
  const LtDesc& d = *p.desc;
  const bool tf32 = d.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  const uint64_t m = p.m, n = p.n, k = p.k;
  // op(A) as (m, k) and op(B)^T as (n, k), row-major doubles: the dot products run contiguous.
  std::vector<double> a(m * k), b(n * k);
  for (uint64_t i = 0; i < m; i++)
    for (uint64_t q = 0; q < k; q++) {
      // op(A)(i, q) = A(i, q) or A(q, i); stored element (r, c) is at r + c * ld.
      const size_t at =
          d.trans_a == CUBLAS_OP_N ? i + q * (size_t)p.a->ld : q + i * (size_t)p.a->ld;
      float v = load(p.a->type, p.A, at);
      a[i * k + q] = tf32 ? to_tf32(v) : v;
    }
  for (uint64_t j = 0; j < n; j++)
    for (uint64_t q = 0; q < k; q++) {
      const size_t at =
          d.trans_b == CUBLAS_OP_N ? q + j * (size_t)p.b->ld : j + q * (size_t)p.b->ld;
      float v = load(p.b->type, p.B, at);
      b[j * k + q] = tf32 ? to_tf32(v) : v;
    }
  const bool bias = d.epilogue & CUBLASLT_EPILOGUE_BIAS;
  const bool gelu_on = d.epilogue & CUBLASLT_EPILOGUE_GELU;
  const bool aux = (d.epilogue & 128) != 0;  // the _AUX variants
  for (uint64_t j = 0; j < n; j++)
    for (uint64_t i = 0; i < m; i++) {
      double acc = 0.0;
      const double* ai = &a[i * k];
      const double* bj = &b[j * k];
      for (uint64_t q = 0; q < k; q++) acc += ai[q] * bj[q];
      // fp32 from here on, as the epilogue of an fp32-compute kernel. With beta == 0, C is not
      // read at all (it may hold NaN).
      float v = p.alpha * (float)acc;
      if (p.beta != 0.0f) v += p.beta * load(p.c->type, p.C, i + j * (size_t)p.c->ld);
      if (bias) v += load(p.d->type, d.bias, i);  // bias: D's type, broadcast over columns
      if (aux) store(p.d->type, d.aux, i + j * (size_t)d.aux_ld, v);
      if (gelu_on) v = gelu(v);
      store(p.d->type, p.D, i + j * (size_t)p.d->ld, v);
    }
}

}  // namespace loom_emu::rt
