// Causal grouped-query attention cpu twin: per (b, head) BLAS on strided qkv views, 64-row tiles.
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

void attention_forward_gqa(float* out, float* att, const float* qkv, int B, int T, int NH, int NKV,
                           int D) {
  const int C = NH * D, group = NH / NKV;
  const int row = C + 2 * NKV * D;  // qkv row stride
  const float scale = 1.0f / std::sqrt((float)D);
  const int ntiles = (T + kTile - 1) / kTile;
  const long long work = (long long)B * NH * ntiles;
  // Every (b, h, tile) writes disjoint rows of att and out, so scheduling cannot change results;
  // BLAS runs single-threaded inside the parallel region (OpenBLAS OpenMP build).
#pragma omp parallel for schedule(dynamic, 1)
  for (long long i = 0; i < work; i++) {
    const int tile = (int)(i % ntiles);
    const int bh = (int)(i / ntiles);
    const int b = bh / NH, h = bh % NH, kvh = h / group;
    const int t0 = tile * kTile, t1 = std::min(T, t0 + kTile), M = t1 - t0;
    const float* x = qkv + (size_t)b * T * row;
    const float* q = x + (size_t)h * D;                // (T, D), row stride `row`
    const float* k = x + C + (size_t)kvh * D;          // (T, D), row stride `row`
    const float* v = x + C + (size_t)(NKV + kvh) * D;  // (T, D), row stride `row`
    float* a = att + ((size_t)bh * T + t0) * T;        // (M, T) rows of (T, T)
    // S (M, t1) = scale * Q[t0:t1] K[0:t1]^T
    gemm(false, true, M, t1, D, scale, q + (size_t)t0 * row, row, k, row, 0.0f, a, T);
    for (int r = 0; r < M; r++) {
      const int t = t0 + r;
      float* arow = a + (size_t)r * T;  // (T)
      float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
      for (int s = 0; s <= t; s++) mx = arow[s] > mx ? arow[s] : mx;  // std::max: not vectorized
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int s = 0; s <= t; s++) {
        const float e = exp_clamped(arow[s] - mx);
        arow[s] = e;
        sum += e;
      }
      const float inv = 1.0f / sum;
#pragma omp simd
      for (int s = 0; s <= t; s++) arow[s] *= inv;
      std::memset(arow + t + 1, 0, sizeof(float) * (size_t)(T - t - 1));
    }
    // O[t0:t1] (M, D) = P (M, t1) V[0:t1] (t1, D)
    float* o = out + ((size_t)b * T + t0) * C + (size_t)h * D;  // (M, D), row stride C
    gemm(false, false, M, D, t1, 1.0f, a, T, v, row, 0.0f, o, C);
  }
}

void attention_backward_gqa(float* dqkv, float* scratch, const float* dout, const float* qkv,
                            const float* att, int B, int T, int NH, int NKV, int D) {
  const int C = NH * D, group = NH / NKV;
  const int row = C + 2 * NKV * D;  // qkv row stride
  const float scale = 1.0f / std::sqrt((float)D);
  // dK and dV accumulate over query heads and tiles in a fixed order, so threads own whole
  // (b, kv head) pairs.
#pragma omp parallel for schedule(static)
  for (int bk = 0; bk < B * NKV; bk++) {
    const int b = bk / NKV, kvh = bk % NKV;
    const size_t base = (size_t)b * T * row;
    const float* k = qkv + base + C + (size_t)kvh * D;          // (T, D), row stride `row`
    const float* v = qkv + base + C + (size_t)(NKV + kvh) * D;  // (T, D), row stride `row`
    float* dk = dqkv + base + C + (size_t)kvh * D;
    float* dv = dqkv + base + C + (size_t)(NKV + kvh) * D;
    for (int t = 0; t < T; t++) {
      std::memset(dk + (size_t)t * row, 0, sizeof(float) * D);
      std::memset(dv + (size_t)t * row, 0, sizeof(float) * D);
    }
    // One query head: accumulate straight into dk/dv. Several: each head's dK/dV (T, D) is
    // summed over its query tiles first (in the (b, kv head)'s slice of scratch after the
    // B*NH*T*T floats of dS), then added to dk/dv in head order.
    float* hk = scratch + (size_t)B * NH * T * T + (size_t)bk * 2 * T * D;  // (T, D)
    float* hv = hk + (size_t)T * D;                                         // (T, D)
    float* ak = group > 1 ? hk : dk;
    float* av = group > 1 ? hv : dv;
    const int lda = group > 1 ? D : row;
    for (int h = kvh * group; h < (kvh + 1) * group; h++) {
      const int bh = b * NH + h;
      const float* q = qkv + base + (size_t)h * D;                 // (T, D), row stride `row`
      float* dq = dqkv + base + (size_t)h * D;                     // (T, D), row stride `row`
      const float* p = att + (size_t)bh * T * T;                   // (T, T)
      float* ds = scratch + (size_t)bh * T * T;                    // (T, T): dP, then dS in place
      const float* go = dout + (size_t)b * T * C + (size_t)h * D;  // (T, D), row stride C
      if (group > 1) {
        std::memset(hk, 0, sizeof(float) * T * D);
        std::memset(hv, 0, sizeof(float) * T * D);
      }
      for (int t0 = 0; t0 < T; t0 += kTile) {
        const int t1 = std::min(T, t0 + kTile), M = t1 - t0;
        const float* pt = p + (size_t)t0 * T;    // (M, t1) used, ld T
        float* dst = ds + (size_t)t0 * T;        // (M, t1) used, ld T
        const float* got = go + (size_t)t0 * C;  // (M, D)
        // dP (M, t1) = dO[t0:t1] V[0:t1]^T
        gemm(false, true, M, t1, D, 1.0f, got, C, v, row, 0.0f, dst, T);
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
        // dQ[t0:t1] (M, D) = scale * dS (M, t1) K[0:t1]
        gemm(false, false, M, D, t1, scale, dst, T, k, row, 0.0f, dq + (size_t)t0 * row, row);
        // dK[0:t1] (t1, D) += scale * dS^T (t1, M) Q[t0:t1]
        gemm(true, false, t1, D, M, scale, dst, T, q + (size_t)t0 * row, row, 1.0f, ak, lda);
        // dV[0:t1] (t1, D) += P^T (t1, M) dO[t0:t1]
        gemm(true, false, t1, D, M, 1.0f, pt, T, got, C, 1.0f, av, lda);
      }
      if (group > 1) {
        for (int t = 0; t < T; t++)
          for (int d = 0; d < D; d++) {
            dk[(size_t)t * row + d] += hk[(size_t)t * D + d];
            dv[(size_t)t * row + d] += hv[(size_t)t * D + d];
          }
      }
    }
  }
}

size_t attention_backward_scratch_floats(int B, int T, int NH, int NKV, int D) {
  const size_t ds = (size_t)B * NH * T * T;
  return NKV == NH ? ds : ds + (size_t)B * NKV * 2 * T * D;
}

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  attention_forward_gqa(out, att, qkv, B, T, NH, NH, C / NH);
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH) {
  attention_backward_gqa(dqkv, scratch, dout, qkv, att, B, T, NH, NH, C / NH);
}

}  // namespace loom::cpu
