// Token + position embedding (vocab-shard aware), cpu twin: forward gather, deterministic backward.
#include "kernels/embedding.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace loom::cpu {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int B, int T, int C, int vocab_start, int vocab_local) {
  const int N = B * T;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float* o = out + (size_t)n * C;                      // (C)
    const int local = tokens[n] - vocab_start;
    const bool in_shard = local >= 0 && local < vocab_local;
    const float* e = in_shard ? wte + (size_t)local * C : nullptr;  // (C)
    const float* p = wpe ? wpe + (size_t)(n % T) * C : nullptr;     // (C)
    if (e && p) {
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
    } else if (e) {
      std::memcpy(o, e, sizeof(float) * C);
    } else if (p) {
      std::memcpy(o, p, sizeof(float) * C);
    } else {
      std::memset(o, 0, sizeof(float) * C);
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, int vocab_start, int vocab_local) {
  // Several rows may hit the same token, so threads split the channels (not the rows) and
  // every element sums its rows in row order: the result is independent of the thread count.
  const int N = B * T;
  constexpr int kChunk = 32;
  const int nchunks = (C + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int ch = 0; ch < nchunks; ch++) {
    const int c0 = ch * kChunk, w = std::min(kChunk, C - c0);
    for (int n = 0; n < N; n++) {
      const int local = tokens[n] - vocab_start;
      if (local < 0 || local >= vocab_local) continue;
      float* d = dwte + (size_t)local * C + c0;  // (w)
      const float* g = dout + (size_t)n * C + c0;  // (w)
#pragma omp simd
      for (int c = 0; c < w; c++) d[c] += g[c];
    }
  }
  if (!dwpe) return;
  // dwpe[t] += sum over b of dout[b, t]: rows t are independent, b in order.
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; t++) {
    float* d = dwpe + (size_t)t * C;  // (C)
    for (int b = 0; b < B; b++) {
      const float* g = dout + ((size_t)b * T + t) * C;  // (C)
#pragma omp simd
      for (int c = 0; c < C; c++) d[c] += g[c];
    }
  }
}

}  // namespace loom::cpu
