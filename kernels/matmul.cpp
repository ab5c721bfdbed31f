// Linear layer and gemm wrapper, cpu twin: OpenBLAS sgemm plus a deterministic bias reduction.
#include "kernels/matmul.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>

namespace loom::cpu {
namespace {
std::atomic<bool> g_stats_on{false};
std::atomic<long long> g_calls{0}, g_flops{0}, g_ns{0};
}  // namespace

void gemm_stats_enable(bool on) { g_stats_on.store(on, std::memory_order_relaxed); }
void gemm_stats_reset() { g_calls = 0, g_flops = 0, g_ns = 0; }
GemmStats gemm_stats() {
  return GemmStats{g_calls.load(), double(g_flops.load()), g_ns.load() * 1e-6};
}

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  const bool timed = g_stats_on.load(std::memory_order_relaxed);
  const auto t0 =
      timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  if (M == 1) {
    // One row (a decode step of one sequence): a matrix-vector product reads B once as it is,
    // where sgemm would first copy B into packed panels. C (N) = alpha op(B)^T a + beta C.
    cblas_sgemv(CblasRowMajor, trans_b ? CblasNoTrans : CblasTrans, trans_b ? N : K,
                trans_b ? K : N, alpha, B, ldb, A, trans_a ? lda : 1, beta, C, 1);
  } else {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  if (timed) {
    long long ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    // Inside a parallel region the team's GEMMs overlap: each counts for 1/team of its time.
    if (omp_in_parallel()) ns /= omp_get_num_threads();
    g_ns.fetch_add(ns, std::memory_order_relaxed);
    g_flops.fetch_add(2LL * M * N * K, std::memory_order_relaxed);
    g_calls.fetch_add(1, std::memory_order_relaxed);
  }
}

void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int N, int IC,
                    int OC) {
  float beta = 0.0f;
  if (bias) {  // out (N, OC) <- bias broadcast, then accumulate the product into it
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) std::memcpy(out + (size_t)n * OC, bias, sizeof(float) * OC);
    beta = 1.0f;
  }
  gemm(false, false, N, OC, IC, 1.0f, inp, IC, w, OC, beta, out, OC);
}

void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                     const float* w, int N, int IC, int OC) {
  // dinp (N, IC) = dout (N, OC) @ w^T (OC, IC)
  if (dinp) gemm(false, true, N, IC, OC, 1.0f, dout, OC, w, OC, 0.0f, dinp, IC);
  // dw (IC, OC) += inp^T (IC, N) @ dout (N, OC)
  gemm(true, false, IC, OC, N, 1.0f, inp, IC, dout, OC, 1.0f, dw, OC);
  if (!dbias) return;
  // dbias (OC) += column sums: threads own column blocks, rows summed in order (deterministic).
  constexpr int kBlock = 64;
  const int nblocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    const int c0 = blk * kBlock, bw = std::min(kBlock, OC - c0);
    float acc[kBlock] = {};  // (bw)
    for (int n = 0; n < N; n++) {
      const float* g = dout + (size_t)n * OC + c0;
#pragma omp simd
      for (int c = 0; c < bw; c++) acc[c] += g[c];
    }
    for (int c = 0; c < bw; c++) dbias[c0 + c] += acc[c];
  }
}

}  // namespace loom::cpu
