// Sum of squares (for the global gradient norm) and in-place scaling of flat buffers.
#pragma once
#include <cstddef>

namespace loom::cpu {

double sum_squares(const float* x, size_t n);  // accumulated in double
void scale_inplace(float* x, float s, size_t n);

}  // namespace loom::cpu
