// RMSNorm cpu twin: per-row forward saving rstd; backward with deterministic dw.
#include "kernels/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace loom::cpu {

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C,
                     float eps) {
  const float invC = 1.0f / (float)C;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = inp + (size_t)n * C;  // (C)
    float* o = out + (size_t)n * C;        // (C)
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; c++) ss += x[c] * x[c];
    const float r = 1.0f / std::sqrt(ss * invC + eps);
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = x[c] * r * w[c];
    if (rstd) rstd[n] = r;
  }
}

void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                      const float* rstd, int N, int C) {
  const float invC = 1.0f / (float)C;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* g = dout + (size_t)n * C;  // (C)
    const float* x = inp + (size_t)n * C;   // (C)
    float* dx = dinp + (size_t)n * C;       // (C)
    const float r = rstd[n];
    float s = 0.0f;  // sum(w g nrm)
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++) s += w[c] * g[c] * (x[c] * r);
    s *= invC;
#pragma omp simd
    for (int c = 0; c < C; c++) dx[c] += (w[c] * g[c] - (x[c] * r) * s) * r;
  }
  // dw: threads own channel blocks and sum rows in order -> same bits for any thread count.
  constexpr int kBlock = 32;
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    const int c0 = blk * kBlock, bw = std::min(kBlock, C - c0);
    float aw[kBlock] = {};  // (bw) partial sums over rows
    for (int n = 0; n < N; n++) {
      const float* g = dout + (size_t)n * C + c0;
      const float* x = inp + (size_t)n * C + c0;
      const float r = rstd[n];
#pragma omp simd
      for (int c = 0; c < bw; c++) aw[c] += g[c] * (x[c] * r);
    }
    for (int c = 0; c < bw; c++) dw[c0 + c] += aw[c];
  }
}

}  // namespace loom::cpu
