// Vectorizable fp32 math for cpu kernels: a branch-free exp that GCC inlines into `omp simd` loops.
#pragma once
#include <cstdint>
#include <cstring>

namespace loom::cpu {

// exp(x) for x clamped to [-80, 80] (results stay normal floats), branch-free so loops vectorize
// (glibc's expf does not without -ffast-math, and costs ~5 ns per call).
// x = n ln2 + r, |r| <= ln2/2; e^r by its degree-7 Taylor polynomial (truncation 7e-9 relative);
// about 2 ulp overall. exp_clamped(-inf) = e^-80, so callers mask out what must be exactly 0.
inline float exp_clamped(float x) {
  x = x < -80.0f ? -80.0f : (x > 80.0f ? 80.0f : x);
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (x * 1.44269504088896341f + shifter) - shifter;
  const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;  // ln2 hi + lo
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = ((int32_t)n + 127) << 23;  // 2^n
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

}  // namespace loom::cpu
