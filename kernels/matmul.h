// GEMMs through BLAS: a row-major gemm wrapper and the linear layer y = x W + b (W is [in, out],
// the Hugging Face GPT-2 Conv1D layout), forward and backward.
#pragma once

namespace loom::cpu {

// Row-major C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C, with leading dimensions.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);

// out (N, OC) = inp (N, IC) @ w (IC, OC) + bias (OC) (bias may be nullptr). Overwrites out.
void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int N, int IC,
                    int OC);

// dinp (N, IC) = dout @ w^T (overwritten; skipped when dinp is nullptr);
// dw (IC, OC) += inp^T @ dout; dbias (OC) += column sums of dout (skipped when nullptr).
void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                     const float* w, int N, int IC, int OC);

// Optional GEMM accounting for benchmarks (off by default; a relaxed flag check when off): every
// gemm() called outside an OpenMP parallel region adds its wall time and 2*M*N*K flops.
struct GemmStats {
  long long calls = 0;
  double flops = 0, ms = 0;
};
void gemm_stats_enable(bool on);
void gemm_stats_reset();
GemmStats gemm_stats();

}  // namespace loom::cpu
