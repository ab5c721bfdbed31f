// Sums of squares (the global gradient norm) and of values (losses), in-place scaling.
#pragma once
#include <cstddef>

namespace loom::cpu {

double sum_squares(const float* x, size_t n);  // accumulated in double
double sum_values(const float* x, size_t n);   // accumulated in double
void scale_inplace(float* x, float s, size_t n);

}  // namespace loom::cpu

#ifdef LOOM_HAVE_CUDA
namespace loom::cuda {

// Scratch of sum_squares: this many doubles of device memory.
constexpr int kSumSquaresPartials = 1024;

// acc[0] (device double) += sum of x[i]^2, accumulated in double by a two-pass block reduction
// whose order depends on n only: the same bits on every run and every device. Call it once per
// buffer on one stream to accumulate a global norm; partials: kSumSquaresPartials doubles.
void sum_squares(double* acc, const float* x, size_t n, double* partials, void* stream);
// acc[0] += sum of x[i], in the same way.
void sum_values(double* acc, const float* x, size_t n, double* partials, void* stream);
void scale_inplace(float* x, float s, size_t n, void* stream);

}  // namespace loom::cuda
#endif  // LOOM_HAVE_CUDA
