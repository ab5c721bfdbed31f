// Residual add and its backward (a gradient accumulation).
#pragma once
#include <cstddef>

namespace loom::cpu {

void residual_forward(float* out, const float* a, const float* b, size_t n);  // out = a + b
void add_inplace(float* acc, const float* x, size_t n);                        // acc += x

}  // namespace loom::cpu
