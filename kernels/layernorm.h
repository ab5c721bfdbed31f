// LayerNorm over the last dimension (eps 1e-5), forward and backward.
#pragma once

namespace loom::cpu {

constexpr float kLayerNormEps = 1e-5f;

// out (N, C) = (inp - mean) * rstd * w + b; saves mean (N), rstd (N) for backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int N, int C);

// dinp (N, C) += d/dinp; dw (C) += ; db (C) += . All three ACCUMULATE (dinp usually holds the
// residual-stream gradient already).
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int N, int C);

}  // namespace loom::cpu

#ifdef LOOM_HAVE_CUDA
#include "kernels/cuda_device.h"

namespace loom::cuda {

// cuda twins on device pointers, enqueued on `stream` (a cudaStream_t). Activations and the
// gains/biases in fp32, bf16 or fp16 (the low-precision copy of the weights); statistics and
// weight gradients always fp32. Same contracts as the cpu twins (mean/rstd may be nullptr in the
// forward; dinp, dw, db accumulate). fp32 math throughout; low-precision storage rounds each
// stored value once. fp16 storage holds magnitudes up to 65504 only: a larger residual-stream
// value or (loss-scaled) dinp becomes inf, which the loss scaler catches (step skipped).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int N, int C, void* stream);
void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w,
                       const bf16* b, int N, int C, void* stream);
void layernorm_forward(f16* out, float* mean, float* rstd, const f16* inp, const f16* w,
                       const f16* b, int N, int C, void* stream);

// dw, db reduced over rows in a fixed order (deterministic, no atomics): with scratch, row chunks
// by separate blocks then the chunk partials in order (kernels/col_sums.cuh); without, one block
// per 32 columns over every row.
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int N, int C,
                        void* stream, Workspace scratch = {});
void layernorm_backward(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp,
                        const bf16* w, const float* mean, const float* rstd, int N, int C,
                        void* stream, Workspace scratch = {});
void layernorm_backward(f16* dinp, float* dw, float* db, const f16* dout, const f16* inp,
                        const f16* w, const float* mean, const float* rstd, int N, int C,
                        void* stream, Workspace scratch = {});

}  // namespace loom::cuda
#endif  // LOOM_HAVE_CUDA
