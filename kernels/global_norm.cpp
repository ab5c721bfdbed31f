// Sum of squares in double and in-place scaling of flat buffers, cpu twin.
#include "kernels/global_norm.h"

namespace loom::cpu {
namespace {
constexpr long long kNormParallelMin = 1 << 15;
}

double sum_squares(const float* x, size_t n) {
  const long long N = (long long)n;
  double s = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : s) if (N >= kNormParallelMin)
  for (long long i = 0; i < N; i++) {
    const double d = (double)x[i];
    s += d * d;
  }
  return s;
}

double sum_values(const float* x, size_t n) {
  const long long N = (long long)n;
  double s = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : s) if (N >= kNormParallelMin)
  for (long long i = 0; i < N; i++) s += (double)x[i];
  return s;
}

void scale_inplace(float* x, float s, size_t n) {
  const long long N = (long long)n;
#pragma omp parallel for simd schedule(static) if (N >= kNormParallelMin)
  for (long long i = 0; i < N; i++) x[i] *= s;
}

}  // namespace loom::cpu
