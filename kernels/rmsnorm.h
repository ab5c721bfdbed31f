// RMSNorm over the last dimension (Llama's: no mean subtraction, no bias), forward and backward.
#pragma once

namespace loom::cpu {

// out (N, C) = inp * rstd * w, rstd (N) = 1 / sqrt(mean_c(inp^2) + eps), saved for backward
// (nullptr allowed: nothing saved). fp32 throughout (Hugging Face's LlamaRMSNorm also normalizes
// in fp32).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C,
                     float eps);

// dinp (N, C) += d/dinp; dw (C) += d/dw. Both ACCUMULATE (dinp usually holds the residual-stream
// gradient already). With nrm = inp * rstd: dinp += rstd * (w g - nrm * mean_c(w g nrm)),
// dw += sum_n g nrm; dw is summed over rows in order (same bits for any thread count).
void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                      const float* rstd, int N, int C);

}  // namespace loom::cpu

#ifdef LOOM_HAVE_CUDA
#include "kernels/cuda_device.h"

namespace loom::cuda {

// cuda twins on device pointers, enqueued on `stream` (a cudaStream_t). Activations and the gain
// in fp32, bf16 or fp16; rstd and dw always fp32; fp32 math, each stored value rounded once (the
// product inp * rstd * w is not rounded to the storage type in between, unlike Hugging Face's
// bf16 module). Same contracts as the cpu twins (dinp and dw accumulate). dw is reduced over rows
// in a fixed order (kernels/col_sums.cuh: two stages with scratch, one without): deterministic.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C,
                     float eps, void* stream);
void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const bf16* w, int N, int C,
                     float eps, void* stream);
void rmsnorm_forward(f16* out, float* rstd, const f16* inp, const f16* w, int N, int C, float eps,
                     void* stream);

void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                      const float* rstd, int N, int C, void* stream, Workspace scratch = {});
void rmsnorm_backward(bf16* dinp, float* dw, const bf16* dout, const bf16* inp, const bf16* w,
                      const float* rstd, int N, int C, void* stream, Workspace scratch = {});
void rmsnorm_backward(f16* dinp, float* dw, const f16* dout, const f16* inp, const f16* w,
                      const float* rstd, int N, int C, void* stream, Workspace scratch = {});

}  // namespace loom::cuda
#endif  // LOOM_HAVE_CUDA
