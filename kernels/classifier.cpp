// Fused classifier + cross-entropy cpu twin: threads own vocab chunks (GEMM + softmax math each).
#include "kernels/classifier.h"

#include <algorithm>
#include <cmath>

#include "kernels/matmul.h"
#include "kernels/vmath.h"

namespace loom::cpu {

int classifier_chunk(int N, int Vl) {
  // One thread's (N, chunk) logits block and (chunk, C) slice of W stay in its 2 MiB L2. Measured
  // (N=256, C=256, 2 threads): 512..2048 columns within noise of each other, 4096 slower.
  const int target = (1 << 18) / std::max(N, 1);
  const int chunk = std::clamp(target / 64 * 64, 256, 2048);
  return std::min(chunk, std::max(Vl, 1));
}

size_t classifier_work_floats(int N, int Vl, int chunk) {
  if (chunk <= 0) chunk = classifier_chunk(N, Vl);
  const size_t nchunks = size_t((Vl + chunk - 1) / chunk);
  return 2 * nchunks * size_t(N);
}

void classifier_forward(float* logits, float* maxv, float* sums, float* work, const float* x,
                        const float* W, const int32_t* targets, int N, int C, int Vl, int vstart,
                        int V, int chunk) {
  if (chunk <= 0) chunk = classifier_chunk(N, Vl);
  const int nv = std::clamp(V - vstart, 0, Vl);  // leading valid columns of the shard
  const int nchunks = (Vl + chunk - 1) / chunk;
  const bool stats = maxv != nullptr;
  float* cmax = work;                                        // (nchunks, N) chunk row max
  float* csum = stats ? work + size_t(nchunks) * N : nullptr;  // (nchunks, N) sum exp(l - cmax)
  if (stats)
    for (int n = 0; n < N; n++) sums[2 * n + 1] = 0.0f;
  // Every chunk is computed whole by one thread (BLAS runs single-threaded inside the region).
#pragma omp parallel for schedule(dynamic, 1)
  for (int c = 0; c < nchunks; c++) {
    const int j0 = c * chunk, w = std::min(chunk, Vl - j0);
    float* lc = logits + j0;  // (N, w) block, ld Vl
    gemm(false, true, N, w, C, 1.0f, x, C, W + size_t(j0) * C, C, 0.0f, lc, Vl);
    if (!stats) continue;
    const int wv = std::clamp(nv - j0, 0, w);  // valid columns of this chunk
    for (int n = 0; n < N; n++) {
      const float* row = lc + size_t(n) * Vl;  // (wv)
      float m = -INFINITY, s = 0.0f;
#pragma omp simd reduction(max : m)
      for (int j = 0; j < wv; j++) m = row[j] > m ? row[j] : m;  // vectorizes (std::max did not)
#pragma omp simd reduction(+ : s)
      for (int j = 0; j < wv; j++) s += exp_clamped(row[j] - m);
      cmax[size_t(c) * N + n] = m;
      csum[size_t(c) * N + n] = wv > 0 ? s : 0.0f;
      const int tl = targets[n] - vstart - j0;
      if (tl >= 0 && tl < wv) sums[2 * n + 1] = row[tl];  // one chunk holds the target
    }
  }
  if (!stats) return;
  // Merge the chunks in order: the result is the same for any thread count and schedule.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float m = -INFINITY;
    for (int c = 0; c < nchunks; c++) m = std::max(m, cmax[size_t(c) * N + n]);
    double s = 0.0;
    if (m != -INFINITY)
      for (int c = 0; c < nchunks; c++) {
        const float cm = cmax[size_t(c) * N + n];
        if (cm != -INFINITY) s += double(csum[size_t(c) * N + n]) * std::exp(double(cm) - m);
      }
    maxv[n] = m;
    sums[2 * n] = float(s);
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
  if (chunk <= 0) chunk = classifier_chunk(N, Vl);
  const int nv = std::clamp(V - vstart, 0, Vl);
  const int nchunks = (Vl + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1)
  for (int c = 0; c < nchunks; c++) {
    const int j0 = c * chunk, w = std::min(chunk, Vl - j0);
    const int wv = std::clamp(nv - j0, 0, w);
    float* lc = logits + j0;  // (N, w) block, ld Vl: logits in, dlogits out
    for (int n = 0; n < N; n++) {
      float* row = lc + size_t(n) * Vl;  // (w)
      const float m = maxv[n], scale = dloss / sums[2 * n];
#pragma omp simd
      for (int j = 0; j < wv; j++) row[j] = exp_clamped(row[j] - m) * scale;
      for (int j = wv; j < w; j++) row[j] = 0.0f;
      const int tl = targets[n] - vstart - j0;
      if (tl >= 0 && tl < wv) row[tl] -= dloss;
    }
    // dW[j0:j0+w] (w, C) += dlogits^T (w, N) @ x (N, C), while the block is in cache
    gemm(true, false, w, C, N, 1.0f, lc, Vl, x, C, 1.0f, dW + size_t(j0) * C, C);
  }
  // dx (N, C) = dlogits (N, Vl) @ W (Vl, C): one threaded GEMM, so no per-thread partial sums.
  gemm(false, false, N, C, Vl, 1.0f, logits, Vl, W, C, 0.0f, dx, C);
}

}  // namespace loom::cpu
