// AdamW on flat fp32 buffers, torch.optim.AdamW arithmetic:
//   p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps),   with g = grad * grad_scale.
#pragma once
#include <cstddef>

namespace loom::cpu {

struct AdamWParams {
  float lr, beta1, beta2, eps, weight_decay;
  int step;          // 1-based
  float grad_scale;  // clipping factor (1 when not clipping)
};

void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const AdamWParams& p);

}  // namespace loom::cpu

#ifdef LOOM_HAVE_CUDA
#include "kernels/cuda_device.h"

namespace loom::cuda {

// cuda twin on device buffers (fp32 master weights, grads and moments), enqueued on `stream`
// (a cudaStream_t). param_bf16 (n, nullable) receives the updated weights rounded to bf16.
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const cpu::AdamWParams& p, bf16* param_bf16, void* stream);

}  // namespace loom::cuda
#endif  // LOOM_HAVE_CUDA
