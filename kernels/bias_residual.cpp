// Bias + residual epilogue, cpu twin (rows in parallel, columns vectorized).
#include "kernels/bias_residual.h"

#include <cstddef>

namespace loom::cpu {

void bias_residual(float* out, const float* resid, const float* partial, const float* bias, int N,
                   int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const size_t row = size_t(n) * C;
    if (bias) {
#pragma omp simd
      for (int c = 0; c < C; ++c) out[row + c] = resid[row + c] + (partial[row + c] + bias[c]);
    } else {
#pragma omp simd
      for (int c = 0; c < C; ++c) out[row + c] = resid[row + c] + partial[row + c];
    }
  }
}

}  // namespace loom::cpu
