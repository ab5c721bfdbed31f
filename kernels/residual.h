// Residual add and its backward (a gradient accumulation).
#pragma once
#include <cstddef>

namespace loom::cpu {

void residual_forward(float* out, const float* a, const float* b, size_t n);  // out = a + b
void add_inplace(float* acc, const float* x, size_t n);                        // acc += x

}  // namespace loom::cpu

#ifdef LOOM_HAVE_CUDA
#include "kernels/cuda_device.h"

namespace loom::cuda {

// cuda twins on device pointers, enqueued on `stream` (a cudaStream_t). out may alias a or b.
// fp32 add, one rounding to the storage type (in fp16 a sum beyond 65504 becomes inf).
void residual_forward(float* out, const float* a, const float* b, size_t n, void* stream);
void residual_forward(bf16* out, const bf16* a, const bf16* b, size_t n, void* stream);
void residual_forward(f16* out, const f16* a, const f16* b, size_t n, void* stream);
void add_inplace(float* acc, const float* x, size_t n, void* stream);
void add_inplace(bf16* acc, const bf16* x, size_t n, void* stream);
void add_inplace(f16* acc, const f16* x, size_t n, void* stream);

}  // namespace loom::cuda
#endif  // LOOM_HAVE_CUDA
