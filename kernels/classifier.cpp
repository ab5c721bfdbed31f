// Fused classifier + cross-entropy cpu twin: per vocab chunk, BLAS GEMMs and the softmax math.
#include "kernels/classifier.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/matmul.h"
#include "kernels/vmath.h"

namespace loom::cpu {

int classifier_chunk(int N, int Vl) {
  // OpenBLAS keeps its full speed down to about 1024 columns (measured: N=256 C=256 loses 20% at
  // 1024 columns, none at 4096; N=1024 C=768 none at 1024), so aim for 4 MiB blocks, in the L2 of
  // two cores together, or at least 1024 columns.
  const int target = (1 << 20) / std::max(N, 1);
  const int chunk = std::max(1024, target / 64 * 64);
  return std::min(chunk, Vl);
}

void classifier_forward(float* logits, float* maxv, float* sums, const float* x, const float* W,
                        const int32_t* targets, int N, int C, int Vl, int vstart, int V,
                        int chunk) {
  const int nv = std::clamp(V - vstart, 0, Vl);  // leading valid columns of the shard
  if (chunk <= 0) chunk = classifier_chunk(N, Vl);
  const bool stats = maxv != nullptr;
  if (stats) {
    for (int n = 0; n < N; n++) {
      maxv[n] = -INFINITY;
      sums[2 * n] = 0.0f;
      sums[2 * n + 1] = 0.0f;
    }
  }
  for (int j0 = 0; j0 < Vl; j0 += chunk) {
    const int w = std::min(chunk, Vl - j0);
    float* lc = logits + j0;  // (N, w) block, ld Vl
    gemm(false, true, N, w, C, 1.0f, x, C, W + (size_t)j0 * C, C, 0.0f, lc, Vl);
    const int wv = std::clamp(nv - j0, 0, w);  // valid columns of this chunk
    if (!stats || wv == 0) continue;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
      const float* row = lc + (size_t)n * Vl;  // (wv)
      float mc = -INFINITY;
#pragma omp simd reduction(max : mc)
      for (int j = 0; j < wv; j++) mc = std::max(mc, row[j]);
      float m = maxv[n], s = sums[2 * n];
      if (mc > m) {  // online softmax: rescale the running sum to the new max
        s = (m == -INFINITY) ? 0.0f : s * std::exp(m - mc);
        m = mc;
      }
      float sc = 0.0f;
#pragma omp simd reduction(+ : sc)
      for (int j = 0; j < wv; j++) sc += exp_clamped(row[j] - m);
      maxv[n] = m;
      sums[2 * n] = s + sc;
      const int tl = targets[n] - vstart - j0;
      if (tl >= 0 && tl < wv) sums[2 * n + 1] = row[tl];
    }
  }
}

void ce_rescale_sums(float* sums, const float* local_max, const float* global_max, int N) {
  for (int n = 0; n < N; n++)
    sums[2 * n] = local_max[n] == -INFINITY ? 0.0f
                                            : sums[2 * n] * std::exp(local_max[n] - global_max[n]);
}

void classifier_backward(float* dx, float* dW, float* logits, const float* maxv, const float* sums,
                         const int32_t* targets, float dloss, const float* x, const float* W, int N,
                         int C, int Vl, int vstart, int V, int chunk) {
  const int nv = std::clamp(V - vstart, 0, Vl);
  if (chunk <= 0) chunk = classifier_chunk(N, Vl);
  for (int j0 = 0; j0 < Vl; j0 += chunk) {
    const int w = std::min(chunk, Vl - j0);
    const int wv = std::clamp(nv - j0, 0, w);
    float* lc = logits + j0;  // (N, w) block, ld Vl: logits in, dlogits out
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
      float* row = lc + (size_t)n * Vl;  // (w)
      const float m = maxv[n], scale = dloss / sums[2 * n];
#pragma omp simd
      for (int j = 0; j < wv; j++) row[j] = exp_clamped(row[j] - m) * scale;
      for (int j = wv; j < w; j++) row[j] = 0.0f;
      const int tl = targets[n] - vstart - j0;
      if (tl >= 0 && tl < wv) row[tl] -= dloss;
    }
    // dx (N, C) (+)= dlogits (N, w) @ W[j0:j0+w] (w, C)
    gemm(false, false, N, C, w, 1.0f, lc, Vl, W + (size_t)j0 * C, C, j0 == 0 ? 0.0f : 1.0f, dx, C);
    // dW[j0:j0+w] (w, C) += dlogits^T (w, N) @ x (N, C)
    gemm(true, false, w, C, N, 1.0f, lc, Vl, x, C, 1.0f, dW + (size_t)j0 * C, C);
  }
}

}  // namespace loom::cpu
