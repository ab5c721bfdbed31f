// Rotary position embedding cpu twin: fp32 tables from double angles; in-place rotation of q, k.
#include "kernels/rope.h"

#include <cmath>
#include <cstddef>

namespace loom::cpu {
namespace {

// Rotates the q and k heads of every row of x (B*T rows) by angle sign * t * inv_freq_i.
void rotate(float* x, const float* cos, const float* sin, int B, int T, int NH, int NKV, int D,
            float sign) {
  const int half = D / 2, heads = NH + NKV;
  const size_t row = (size_t)(NH + 2 * NKV) * D;
#pragma omp parallel for schedule(static)
  for (long long bt = 0; bt < (long long)B * T; bt++) {
    const int t = (int)(bt % T);
    const float* c = cos + (size_t)t * half;  // (D/2)
    const float* s = sin + (size_t)t * half;  // (D/2)
    for (int h = 0; h < heads; h++) {
      float* v = x + (size_t)bt * row + (size_t)h * D;  // (D): q heads, then k heads
#pragma omp simd
      for (int i = 0; i < half; i++) {
        const float a = v[i], b = v[i + half], si = sign * s[i];
        v[i] = a * c[i] - b * si;
        v[i + half] = b * c[i] + a * si;
      }
    }
  }
}

}  // namespace

void rope_table(float* cos, float* sin, int T, int D, float theta) {
  const int half = D / 2;
  for (int i = 0; i < half; i++) {
    const double inv_freq = std::pow((double)theta, -2.0 * i / (double)D);
    for (int t = 0; t < T; t++) {
      const double a = (double)t * inv_freq;
      cos[(size_t)t * half + i] = (float)std::cos(a);
      sin[(size_t)t * half + i] = (float)std::sin(a);
    }
  }
}

void rope_forward(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                  int D) {
  rotate(qkv, cos, sin, B, T, NH, NKV, D, 1.0f);
}

void rope_backward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                   int D) {
  rotate(dqkv, cos, sin, B, T, NH, NKV, D, -1.0f);
}

}  // namespace loom::cpu
