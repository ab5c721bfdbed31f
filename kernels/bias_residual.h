// Bias + residual epilogue of a row-parallel projection: out = resid + (partial + bias).
#pragma once

namespace loom::cpu {

// out (N, C) = resid (N, C) + (partial (N, C) + bias[c] (C)), in exactly that order (the bias is
// added to the all-reduced partial product first, then the residual stream). out may alias resid
// or partial (each element is read before it is written). bias may be null (no bias: llama).
void bias_residual(float* out, const float* resid, const float* partial, const float* bias, int N,
                   int C);

}  // namespace loom::cpu

#ifdef LOOM_HAVE_CUDA
#include "kernels/cuda_device.h"

namespace loom::cuda {

// cuda twins on device pointers, enqueued on `stream` (a cudaStream_t). fp32 math in the cpu
// twin's order; bf16/fp16 storage rounds the result once (so fp32 results are bitwise the cpu twin's).
// 128-bit accesses when C is a multiple of the pack and every pointer is 16-byte aligned.
void bias_residual(float* out, const float* resid, const float* partial, const float* bias, int N,
                   int C, void* stream);
void bias_residual(bf16* out, const bf16* resid, const bf16* partial, const bf16* bias, int N,
                   int C, void* stream);
void bias_residual(f16* out, const f16* resid, const f16* partial, const f16* bias, int N, int C,
                   void* stream);

}  // namespace loom::cuda
#endif  // LOOM_HAVE_CUDA
