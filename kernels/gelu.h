// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once
#include <cstddef>

namespace loom::cpu {

void gelu_forward(float* out, const float* inp, size_t n);                     // overwrites out
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);  // overwrites dinp

}  // namespace loom::cpu

#ifdef LOOM_HAVE_CUDA
#include "kernels/cuda_device.h"

namespace loom::cuda {

// cuda twins on device pointers, enqueued on `stream` (a cudaStream_t; nullptr: default stream).
// fp32 math; bf16 or fp16 storage rounds the result once. dinp may alias dout.
void gelu_forward(float* out, const float* inp, size_t n, void* stream);
void gelu_forward(bf16* out, const bf16* inp, size_t n, void* stream);
void gelu_forward(f16* out, const f16* inp, size_t n, void* stream);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n, void* stream);
void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, size_t n, void* stream);
void gelu_backward(f16* dinp, const f16* inp, const f16* dout, size_t n, void* stream);

}  // namespace loom::cuda
#endif  // LOOM_HAVE_CUDA
