// Vocab-parallel softmax cross-entropy cpu twin: row max, row sums, loss, in-place backward.
#include "kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace loom::cpu {
namespace {

// Number of leading shard columns that are real vocab ids (the rest is padding).
inline int valid_cols(int Vl, int vstart, int V) { return std::clamp(V - vstart, 0, Vl); }

}  // namespace

void ce_row_max(float* maxv, const float* logits, int N, int Vl, int vstart, int V) {
  const int nv = valid_cols(Vl, vstart, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* row = logits + (size_t)n * Vl;  // (Vl)
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < nv; j++) mx = row[j] > mx ? row[j] : mx;  // std::max: not vectorized
    maxv[n] = mx;
  }
}

void ce_row_sums(float* sums, const float* logits, const float* maxv, const int32_t* targets, int N,
                 int Vl, int vstart, int V) {
  const int nv = valid_cols(Vl, vstart, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* row = logits + (size_t)n * Vl;  // (Vl)
    const float mx = maxv[n];
    double s = 0.0;  // double: tens of thousands of terms, and it costs nothing next to expf
    for (int j = 0; j < nv; j++) s += (double)std::exp(row[j] - mx);
    const int tl = targets[n] - vstart;
    sums[2 * n] = (float)s;
    sums[2 * n + 1] = (tl >= 0 && tl < nv) ? row[tl] : 0.0f;
  }
}

void ce_loss(float* losses, const float* maxv, const float* sums, int N) {
  for (int n = 0; n < N; n++) losses[n] = std::log(sums[2 * n]) + maxv[n] - sums[2 * n + 1];
}

void ce_backward_inplace(float* logits, const float* maxv, const float* sums,
                         const int32_t* targets, float dloss, int N, int Vl, int vstart, int V) {
  const int nv = valid_cols(Vl, vstart, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float* row = logits + (size_t)n * Vl;  // (Vl): logits in, dlogits out
    const float mx = maxv[n];
    const float scale = dloss / sums[2 * n];
    for (int j = 0; j < nv; j++) row[j] = std::exp(row[j] - mx) * scale;
    for (int j = nv; j < Vl; j++) row[j] = 0.0f;
    const int tl = targets[n] - vstart;
    if (tl >= 0 && tl < nv) row[tl] -= dloss;
  }
}

}  // namespace loom::cpu
