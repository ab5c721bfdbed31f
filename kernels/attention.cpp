// Causal multi-head attention cpu twin: per (b, h) BLAS on strided qkv views, in row tiles of 64.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "kernels/matmul.h"
#include "kernels/vmath.h"

namespace loom::cpu {
namespace {

// Query rows are processed in tiles: tile [t0, t1) only needs key columns [0, t1), which skips
// most of the masked upper triangle for long sequences.
constexpr int kTile = 64;

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  const int HS = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt((float)HS);
  const int ntiles = (T + kTile - 1) / kTile;
  const long long work = (long long)B * NH * ntiles;
  // Every (b, h, tile) writes disjoint rows of att and out, so scheduling cannot change results;
  // BLAS runs single-threaded inside the parallel region (OpenBLAS OpenMP build).
#pragma omp parallel for schedule(dynamic, 1)
  for (long long i = 0; i < work; i++) {
    const int tile = (int)(i % ntiles);
    const int bh = (int)(i / ntiles);
    const int b = bh / NH, h = bh % NH;
    const int t0 = tile * kTile, t1 = std::min(T, t0 + kTile), M = t1 - t0;
    const float* q = qkv + (size_t)b * T * C3 + (size_t)h * HS;  // (T, HS), row stride 3C
    const float* k = q + C;                                       // (T, HS), row stride 3C
    const float* v = q + 2 * C;                                   // (T, HS), row stride 3C
    float* a = att + ((size_t)bh * T + t0) * T;                   // (M, T) rows of (T, T)
    // S (M, t1) = scale * Q[t0:t1] K[0:t1]^T
    gemm(false, true, M, t1, HS, scale, q + (size_t)t0 * C3, C3, k, C3, 0.0f, a, T);
    for (int r = 0; r < M; r++) {
      const int t = t0 + r;
      float* row = a + (size_t)r * T;  // (T)
      float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
      for (int s = 0; s <= t; s++) mx = row[s] > mx ? row[s] : mx;  // std::max: not vectorized
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int s = 0; s <= t; s++) {
        const float e = exp_clamped(row[s] - mx);
        row[s] = e;
        sum += e;
      }
      const float inv = 1.0f / sum;
#pragma omp simd
      for (int s = 0; s <= t; s++) row[s] *= inv;
      std::memset(row + t + 1, 0, sizeof(float) * (size_t)(T - t - 1));
    }
    // O[t0:t1] (M, HS) = P (M, t1) V[0:t1] (t1, HS)
    float* o = out + ((size_t)b * T + t0) * C + (size_t)h * HS;  // (M, HS), row stride C
    gemm(false, false, M, HS, t1, 1.0f, a, T, v, C3, 0.0f, o, C);
  }
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH) {
  const int HS = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt((float)HS);
  // dK and dV accumulate over query tiles in a fixed order, so threads own whole (b, h) pairs.
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH;
    const size_t base = (size_t)b * T * C3 + (size_t)h * HS;
    const float* q = qkv + base;      // (T, HS), row stride 3C
    const float* k = q + C;
    const float* v = q + 2 * C;
    float* dq = dqkv + base;          // (T, HS), row stride 3C
    float* dk = dq + C;
    float* dv = dq + 2 * C;
    const float* p = att + (size_t)bh * T * T;                // (T, T)
    float* ds = scratch + (size_t)bh * T * T;                 // (T, T): dP, then dS in place
    const float* go = dout + (size_t)b * T * C + (size_t)h * HS;  // (T, HS), row stride C
    for (int t = 0; t < T; t++) {
      std::memset(dk + (size_t)t * C3, 0, sizeof(float) * HS);
      std::memset(dv + (size_t)t * C3, 0, sizeof(float) * HS);
    }
    for (int t0 = 0; t0 < T; t0 += kTile) {
      const int t1 = std::min(T, t0 + kTile), M = t1 - t0;
      const float* pt = p + (size_t)t0 * T;  // (M, t1) used, ld T
      float* dst = ds + (size_t)t0 * T;      // (M, t1) used, ld T
      const float* got = go + (size_t)t0 * C;  // (M, HS)
      // dP (M, t1) = dO[t0:t1] V[0:t1]^T
      gemm(false, true, M, t1, HS, 1.0f, got, C, v, C3, 0.0f, dst, T);
      // dS = P * (dP - rowsum(dP * P)); P is 0 above the diagonal, so dS is too.
      for (int r = 0; r < M; r++) {
        const float* pr = pt + (size_t)r * T;
        float* dr = dst + (size_t)r * T;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int s = 0; s < t1; s++) dot += pr[s] * dr[s];
#pragma omp simd
        for (int s = 0; s < t1; s++) dr[s] = pr[s] * (dr[s] - dot);
      }
      // dQ[t0:t1] (M, HS) = scale * dS (M, t1) K[0:t1]
      gemm(false, false, M, HS, t1, scale, dst, T, k, C3, 0.0f, dq + (size_t)t0 * C3, C3);
      // dK[0:t1] (t1, HS) += scale * dS^T (t1, M) Q[t0:t1]
      gemm(true, false, t1, HS, M, scale, dst, T, q + (size_t)t0 * C3, C3, 1.0f, dk, C3);
      // dV[0:t1] (t1, HS) += P^T (t1, M) dO[t0:t1]
      gemm(true, false, t1, HS, M, 1.0f, pt, T, got, C, 1.0f, dv, C3);
    }
  }
}

}  // namespace loom::cpu
