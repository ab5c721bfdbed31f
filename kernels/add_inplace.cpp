// Elementwise accumulation, cpu twin (vectorized).
#include "kernels/add_inplace.h"

namespace loom::cpu {
namespace {
constexpr long long kAddParallelMin = 1 << 15;
}

void add_inplace(float* acc, const float* x, size_t n) {
  const long long N = (long long)n;
#pragma omp parallel for simd schedule(static) if (N >= kAddParallelMin)
  for (long long i = 0; i < N; i++) acc[i] += x[i];
}

}  // namespace loom::cpu
