// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once
#include <cstddef>

namespace loom::cpu {

void gelu_forward(float* out, const float* inp, size_t n);                     // overwrites out
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);  // overwrites dinp

}  // namespace loom::cpu
