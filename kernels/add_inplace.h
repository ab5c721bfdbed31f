// Elementwise accumulation acc += x (gradient accumulation).
#pragma once
#include <cstddef>

namespace loom::cpu {

void add_inplace(float* acc, const float* x, size_t n);  // acc += x

}  // namespace loom::cpu

#ifdef LOOM_HAVE_CUDA
#include "kernels/cuda_device.h"

namespace loom::cuda {

// cuda twin on device pointers, enqueued on `stream` (a cudaStream_t): one fp32 add per element.
void add_inplace(float* acc, const float* x, size_t n, void* stream);

}  // namespace loom::cuda
#endif  // LOOM_HAVE_CUDA
