// GELU (tanh approximation) cpu twin, elementwise forward and backward, vectorized.
#include "kernels/gelu.h"

#include "kernels/vmath.h"

namespace loom::cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCoef = 0.044715f;
// Below this many elements a parallel region costs more than it saves.
constexpr long long kGeluParallelMin = 1 << 14;

}  // namespace

// 0.5 x (1 + tanh(u)) is evaluated as x * sigmoid(2u) = x / (1 + e^{-2u}): the same function
// without the cancellation in 1 + tanh(u) for negative x.
void gelu_forward(float* out, const float* inp, size_t n) {
  const long long N = (long long)n;
#pragma omp parallel for simd schedule(static) if (N >= kGeluParallelMin)
  for (long long i = 0; i < N; i++) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCoef * x * x * x);
    out[i] = x / (1.0f + exp_clamped(-2.0f * u));
  }
}

// d/dx with s = sigmoid(2u), e = e^{-2u} (so 1 - s = e s): 1 + tanh = 2s, 1 - tanh^2 = 4 s (1-s),
// gelu' = 0.5 (1 + tanh) + 0.5 x (1 - tanh^2) u' = s (1 + 2 x e s u').
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  const long long N = (long long)n;
#pragma omp parallel for simd schedule(static) if (N >= kGeluParallelMin)
  for (long long i = 0; i < N; i++) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCoef * x * x * x);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCoef * x * x);
    const float e = exp_clamped(-2.0f * u);
    const float s = 1.0f / (1.0f + e);
    dinp[i] = s * (1.0f + 2.0f * x * e * s * du) * dout[i];  // read before write: may alias dout
  }
}

}  // namespace loom::cpu
