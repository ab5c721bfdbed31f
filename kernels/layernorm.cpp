// LayerNorm cpu twin: per-row forward saving mean/rstd; backward with deterministic dw/db.
#include "kernels/layernorm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace loom::cpu {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int N, int C) {
  const float invC = 1.0f / (float)C;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = inp + (size_t)n * C;  // (C)
    float* o = out + (size_t)n * C;        // (C)
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++) s += x[c];
    const float m = s * invC;
    float v = 0.0f;  // two-pass variance: no cancellation for rows with a large mean
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) {
      const float d = x[c] - m;
      v += d * d;
    }
    const float r = 1.0f / std::sqrt(v * invC + kLayerNormEps);
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + b[c];
    if (mean) mean[n] = m;  // nullptr allowed (inference: nothing to save)
    if (rstd) rstd[n] = r;
  }
}

void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int N, int C) {
  const float invC = 1.0f / (float)C;
  // dinp: rows are independent.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* g = dout + (size_t)n * C;  // (C)
    const float* x = inp + (size_t)n * C;   // (C)
    float* dx = dinp + (size_t)n * C;       // (C)
    const float m = mean[n], r = rstd[n];
    float s1 = 0.0f, s2 = 0.0f;  // sum(dnorm), sum(dnorm * norm)
#pragma omp simd reduction(+ : s1, s2)
    for (int c = 0; c < C; c++) {
      const float dn = w[c] * g[c];
      s1 += dn;
      s2 += dn * ((x[c] - m) * r);
    }
    s1 *= invC;
    s2 *= invC;
#pragma omp simd
    for (int c = 0; c < C; c++) {
      const float nrm = (x[c] - m) * r;
      dx[c] += (w[c] * g[c] - s1 - nrm * s2) * r;
    }
  }
  // dw, db: threads own channel blocks and sum rows in order -> same bits for any thread count.
  constexpr int kBlock = 32;
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    const int c0 = blk * kBlock, bw = std::min(kBlock, C - c0);
    float aw[kBlock] = {}, ab[kBlock] = {};  // (bw) partial sums over rows
    for (int n = 0; n < N; n++) {
      const float* g = dout + (size_t)n * C + c0;
      const float* x = inp + (size_t)n * C + c0;
      const float m = mean[n], r = rstd[n];
#pragma omp simd
      for (int c = 0; c < bw; c++) {
        aw[c] += g[c] * ((x[c] - m) * r);
        ab[c] += g[c];
      }
    }
    for (int c = 0; c < bw; c++) {
      dw[c0 + c] += aw[c];
      db[c0 + c] += ab[c];
    }
  }
}

}  // namespace loom::cpu
