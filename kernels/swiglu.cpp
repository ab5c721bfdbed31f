// SwiGLU cpu twin: elementwise over the [gate | up] halves of each row.
#include "kernels/swiglu.h"

#include <cstddef>

#include "kernels/vmath.h"

namespace loom::cpu {

void swiglu_forward(float* out, const float* gu, int N, int F) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* g = gu + (size_t)n * 2 * F;  // (F) gate
    const float* u = g + F;                   // (F) up
    float* o = out + (size_t)n * F;           // (F)
#pragma omp simd
    for (int f = 0; f < F; f++) o[f] = g[f] / (1.0f + exp_clamped(-g[f])) * u[f];
  }
}

void swiglu_backward(float* dgu, const float* dout, const float* gu, int N, int F) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* g = gu + (size_t)n * 2 * F;  // (F) gate
    const float* u = g + F;                   // (F) up
    const float* d = dout + (size_t)n * F;    // (F)
    float* dg = dgu + (size_t)n * 2 * F;      // (F) d gate
    float* du = dg + F;                       // (F) d up
#pragma omp simd
    for (int f = 0; f < F; f++) {
      const float s = 1.0f / (1.0f + exp_clamped(-g[f]));
      dg[f] = d[f] * u[f] * (s * (1.0f + g[f] * (1.0f - s)));
      du[f] = d[f] * (g[f] * s);
    }
  }
}

}  // namespace loom::cpu
