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
